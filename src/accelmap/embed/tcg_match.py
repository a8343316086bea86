"""Top-down matching of instruction TCGs in a workload TCG (Rieber's 2022 dissertation, Sec. 3.2).

Every instruction is a TCG. Its root-to-leaf paths become token strings (node label, child index,
node label, ...; iterator references are upward distances, so a path is position independent) and
all of them go into one Aho-Corasick automaton, a top-down tree matcher after Hoffmann and
O'Donnell. The workload is walked once in right-to-left pre-order with the automaton state of each
node's path; a pattern path reported at a workload leaf names the match root (the ancestor as many
nodes up as the path is long) and increments the counter of (root, instruction).

A match is *full* when the counter equals the instruction's leaf count and the leaf count of the
root's right-hand subgraph. Outer input dimensions are masked: an input's leading accesses whose
iterators are all defined above the match root are not leaves of that match (they become outer
loops); an input whose accesses are all masked acts as a scalar, which a scalar operand matches.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable

from accelmap.arch.intrinsics import Intrinsic, get_intrinsic, library_names
from accelmap.embed.tcg import TCG, Node, build_tcg, parse_program
from accelmap.errors import SpecError

ELEMENTWISE_OPS = ("add", "mul", "sub", "div", "max", "exp")
REDUCTION_OPS = ("add", "mul", "max")
_REDUCE_FN = {"add": "sum", "mul": "prod", "max": "rmax"}
_BINARY = {"add": "{a} + {b}", "mul": "{a} * {b}", "sub": "{a} - {b}", "div": "{a} / {b}", "max": "max({a}, {b})"}


@dataclass(frozen=True)
class Instruction:
    """One hardware instruction as a TCG pattern (the program text it was built from is kept)."""

    name: str
    kind: str          # the Table 3.1 row
    text: str
    pattern: Node      # root of the pattern tree
    paths: tuple[tuple[str, ...], ...]
    sizes: tuple[tuple[str, int], ...] = ()   # a fixed-size instruction's extent per dimension (none: variable)
    cycles: int = 1    # issue interval of one call (an intrinsic's ``cycles``; Table 3.1 gives no timing: 1)

    @property
    def leaves(self) -> int:
        return len(self.paths)

    def __str__(self) -> str:
        return f"{self.name} ({self.kind}): {self.text}"


def instruction(name: str, kind: str, text: str, sizes: dict[str, int] | None = None, cycles: int = 1) -> Instruction:
    """An instruction from its program text; ``sizes`` fixes its extents (none: a variable-size instruction)."""
    g = build_tcg(parse_program(text, sizes or {"i": 16, "j": 16}, name))
    root = g.root
    # A scalar result (reduction, dot) is rooted in the reduction itself, not in a length-1 tensor.
    if root.defines == "_":
        root = root.children[0]
    return Instruction(name, kind, text, root, tuple(_paths(root)), tuple((sizes or {}).items()), cycles)


def _paths(root: Node) -> Iterable[tuple[str, ...]]:
    stack: list[tuple[Node, tuple[str, ...]]] = [(root, (root.label,))]
    while stack:
        n, toks = stack.pop()
        if not n.children:
            yield toks
        for k, c in enumerate(n.children):
            stack.append((c, toks + (str(k), c.label)))


def table_3_1() -> tuple[Instruction, ...]:
    """The instruction set of Table 3.1 (vector-scalar, vector-vector, reduction, dot, matrix-vector).

    Our reading of the table: exp is unary (one vector instruction); the scalar operand of a
    vector-scalar op is a register scalar or an immediate; sub and div also come with the scalar
    on the left, which sigmoid's ``1 / (1 + exp(0 - x))`` needs."""
    out = []
    for op in ELEMENTWISE_OPS:
        if op == "exp":
            out.append(instruction("vexp", "vector", "y[i] = exp(x[i])"))
            continue
        body = _BINARY[op]
        out.append(instruction(f"vs_{op}", "vector-scalar", f"y[i] = {body.format(a='x[i]', b='s')}"))
        out.append(instruction(f"vs_{op}_imm", "vector-scalar", f"y[i] = {body.format(a='x[i]', b='1')}"))
        if op in ("sub", "div"):
            out.append(instruction(f"sv_{op}", "vector-scalar", f"y[i] = {body.format(a='s', b='x[i]')}"))
            out.append(instruction(f"sv_{op}_imm", "vector-scalar", f"y[i] = {body.format(a='1', b='x[i]')}"))
        out.append(instruction(f"vv_{op}", "vector-vector", f"y[i] = {body.format(a='a[i]', b='b[i]')}"))
    for r in REDUCTION_OPS:
        fn = _REDUCE_FN[r]
        out.append(instruction(f"red_{r}", "reduction", f"y = {fn}(x[i], i)"))
        for op in ELEMENTWISE_OPS:
            dot = "exp(a[i])" if op == "exp" else _BINARY[op].format(a="a[i]", b="b[i]")
            mv = "exp(m[j,i])" if op == "exp" else _BINARY[op].format(a="m[j,i]", b="v[i]")
            out.append(instruction(f"dot_{op}_{r}", "dot", f"y = {fn}({dot}, i)"))
            out.append(instruction(f"mv_{op}_{r}", "matrix-vector", f"y[j] = {fn}({mv}, i)"))
    return tuple(out)


def intrinsic_instruction(intr: Intrinsic) -> Instruction:
    """One of our intrinsics (a multiply-accumulate) as a TCG pattern. A dimension of size 1 is no
    loop of the intrinsic, so its index is dropped: VTA's 1x16x16 GEMM becomes a vector-matrix
    product, and the workload dimension it stood for is masked like any outer dimension."""
    op = intr.operator
    ones = {d for d, n in op.dims if n == 1}

    def load(o) -> str:
        ixs = [str(ix) for ix in o.indices if not set(ix.dims) <= ones]
        return f"{o.name}[{','.join(ixs)}]" if ixs else o.name

    out = [ix.dims[0] for ix in op.output.indices if ix.dims[0] not in ones]
    reduced = [d for d in op.dim_names if d not in {ix.dims[0] for ix in op.output.indices} and d not in ones]
    body = " * ".join(load(o) for o in op.inputs)
    expr = f"sum({body}, {', '.join(reduced)})" if reduced else body
    target = f"{op.output.name}[{','.join(out)}]" if out else op.output.name
    return instruction(intr.name, intr.kind, f"{target} = {expr}", {d: n for d, n in op.dims if n != 1}, intr.cycles)


def get_isa(name: str) -> tuple[Instruction, ...]:
    """``table3.1``, ``library`` (every intrinsic of our library), or one intrinsic (library name or YAML)."""
    if name == "table3.1":
        return table_3_1()
    if name == "library":
        return tuple(intrinsic_instruction(get_intrinsic(n)) for n in library_names())
    try:
        return (intrinsic_instruction(get_intrinsic(name)),)
    except SpecError:
        raise SpecError(f"unknown instruction set {name!r}; use table3.1, library, an intrinsic of the library "
                        f"({', '.join(library_names())}) or an intrinsic YAML", where="--isa") from None


class PathAutomaton:
    """Aho-Corasick over token strings: goto, failure and output functions (Aho & Corasick 1975)."""

    def __init__(self, strings: Iterable[tuple[tuple[str, ...], object]]):
        self.goto: list[dict[str, int]] = [{}]
        self.out: list[list[tuple[object, int]]] = [[]]
        for toks, tag in strings:
            s = 0
            for t in toks:
                nxt = self.goto[s].get(t)
                if nxt is None:
                    nxt = len(self.goto)
                    self.goto[s][t] = nxt
                    self.goto.append({})
                    self.out.append([])
                s = nxt
            self.out[s].append((tag, len(toks)))
        self.fail = [0] * len(self.goto)
        queue = deque(self.goto[0].values())
        while queue:
            s = queue.popleft()
            for t, nxt in self.goto[s].items():
                f = self.fail[s]
                while f and t not in self.goto[f]:
                    f = self.fail[f]
                self.fail[nxt] = self.goto[f].get(t, 0) if self.goto[f].get(t, 0) != nxt else 0
                self.out[nxt] = self.out[nxt] + self.out[self.fail[nxt]]
                queue.append(nxt)

    def step(self, s: int, token: str) -> int:
        while s and token not in self.goto[s]:
            s = self.fail[s]
        return self.goto[s].get(token, 0)


@dataclass(frozen=True)
class Match:
    instruction: str
    root: int                  # pre-order index of the workload node the instruction's root sits on
    covered: frozenset[int]    # workload nodes the instruction computes
    masked: tuple[str, ...]    # outer dimensions masked off (they stay loops around the instruction)

    def __str__(self) -> str:
        mask = f", masked {','.join(self.masked)}" if self.masked else ""
        return f"{self.instruction}@{self.root} ({len(self.covered)} nodes{mask})"


def _region(r: Node) -> list[Node]:
    """The root's right-hand subgraph: a tensor node's left child is the preceding computation."""
    out = [r]
    stack = [r.children[0]] if r.kind == "tensor" else list(r.children)
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.children)
    return out


def _masked_accesses(inp: Node, inside: set[int]) -> int:
    """How many leading (outermost) accesses of an input refer only to iterators outside the match."""
    k = 0
    for a in reversed(inp.children):   # children[-1] is the outermost dimension
        owners = _owners(a)
        if owners & inside:
            break
        k += 1
    return k


def _owners(a: Node) -> set[int]:
    if a.owner is not None:
        return {a.owner.index}
    return set().union(*(_owners(c) for c in a.children)) if a.children else set()


def _access_owners(a: Node) -> list[Node]:
    if a.owner is not None:
        return [a.owner]
    return [o for c in a.children for o in _access_owners(c)]


def match(tcg: TCG, isa: Iterable[Instruction]) -> list[Match]:
    """All full matches of the instructions in the workload, ordered by root (pre-order)."""
    return Matcher(isa).match(tcg)


class Matcher:
    """The automaton of an instruction set, built once and run on many workload graphs."""

    def __init__(self, isa: Iterable[Instruction]):
        self.isa = tuple(isa)
        self.automaton = PathAutomaton((p, k) for k, ins in enumerate(self.isa) for p in ins.paths)

    def match(self, tcg: TCG) -> list[Match]:
        return _match(tcg, self.isa, self.automaton)


def _match(tcg: TCG, isa: tuple[Instruction, ...], auto: PathAutomaton) -> list[Match]:
    counter: dict[tuple[int, int], int] = {}
    nodes = tcg.nodes
    states = [0] * len(nodes)
    regions: dict[int, set[int]] = {}
    for n in nodes:   # pre-order: a parent's state is known before its children
        if n.parent is None:
            states[n.index] = auto.step(0, n.label)
        else:
            states[n.index] = auto.step(auto.step(states[n.parent.index], str(n.pos)), n.label)
        for tag, length in auto.out[states[n.index]]:
            assert isinstance(tag, int)
            up = (length - 1) // 2
            if up > n.depth:
                continue
            r = n
            for _ in range(up):
                assert r.parent is not None
                r = r.parent
            if n.children:
                # A pattern's scalar input landing on a workload input: all its accesses must be masked.
                if r.index not in regions:
                    regions[r.index] = {x.index for x in _region(r)}
                if n.kind != "input" or _masked_accesses(n, regions[r.index]) != len(n.children):
                    continue
            counter[(r.index, tag)] = counter.get((r.index, tag), 0) + 1
    found = []
    for (ri, tag), cnt in sorted(counter.items()):
        ins = isa[tag]
        if cnt != ins.leaves:
            continue
        covered, leaves, masked = _cover(nodes[ri])
        if leaves == cnt:
            found.append(Match(ins.name, ri, frozenset(covered), tuple(masked)))
    return found


def _cover(r: Node) -> tuple[set[int], int, list[str]]:
    """Nodes a match rooted at r computes, its leaf count after masking, and the masked dimensions."""
    region = _region(r)
    inside = {x.index for x in region}
    covered = set(inside)
    leaves = 0
    masked: dict[int, str] = {}   # owner pre-order index -> dimension, so outer dimensions print first
    for n in region:
        if n.kind == "input" and n.children:
            k = _masked_accesses(n, inside)
            for a in n.children[len(n.children) - k:]:
                covered -= {x.index for x in _region_all(a)}
                masked.update({o.index: o.defines or "?" for o in _access_owners(a)})
            if k == len(n.children):
                leaves += 1
        elif not n.children:
            leaves += 1
    # leaves under masked accesses were counted above; take them back out
    leaves -= sum(1 for n in region if not n.children and n.index not in covered)
    return covered, leaves, [masked[k] for k in sorted(masked)]


def _region_all(a: Node) -> list[Node]:
    out, stack = [], [a]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.children)
    return out
