"""Tensor Compute Graphs (Rieber's 2022 dissertation, ch. 3, Definition 3.1 and the grammar of Fig. 3.2).

An operator is first written as a *program*: a sequence of statements ``out[dims] = expr`` whose
expressions use loads, scalar constants, element-wise ops and reductions (``sum(body, k)``). The TCG
is the tree the thesis matches on, derived from that program:

- ``tensor`` nodes, one per output dimension, nested along right children; the outermost tensor
  node of a statement has the previous statement as its left child (program order);
- ``reduction`` nodes (right child = initial value, left child = the reduced input);
- ``compute`` nodes (element-wise op; right child = right operand);
- ``input`` nodes with one ``access`` child per dimension, innermost dimension rightmost;
- ``access`` nodes: an iterator reference, an integer, or an op over sub-accesses.

Children are numbered right to left (the thesis' direction labels), so the innermost dimension of
an input is child 0 and masking outer dimensions never renumbers the inner ones.

Conventions that decide node counts (stated because the thesis does not spell them out): an
immediate scalar constant (a reduction's initial value, the 1 of a sigmoid) is one ``input`` node
without access children; a scalar tensor read (attention's ``s``) is an input without accesses too.
With them GEMM has 11 nodes, as in Table 3.3.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence, Union

import numpy as np

from accelmap.errors import SpecError
from accelmap.workload.operator import Operator
from accelmap.workload.text_form import parse_expression

# ---------------------------------------------------------------- the program form

ELEMENTWISE_BINARY = {ast.Add: "add", ast.Mult: "mul", ast.Sub: "sub", ast.Div: "div"}
COMMUTATIVE = frozenset({"add", "mul", "max"})
UNARY = {"exp": np.exp, "sqrt": np.sqrt}   # element-wise functions and their NumPy meaning
REDUCTIONS = {"sum": "add", "prod": "mul", "rmax": "max"}


@dataclass(frozen=True)
class Iter:
    dim: str


@dataclass(frozen=True)
class IConst:
    value: int


@dataclass(frozen=True)
class IOp:
    op: str
    left: "Index"
    right: "Index"


Index = Union[Iter, IConst, IOp]


@dataclass(frozen=True)
class Load:
    tensor: str
    indices: tuple[Index, ...]


@dataclass(frozen=True)
class Const:
    value: float


@dataclass(frozen=True)
class Unary:
    op: str
    x: "Expr"


@dataclass(frozen=True)
class Binary:
    op: str
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True)
class Reduce:
    op: str
    dim: str
    body: "Expr"
    init: "Expr"


Expr = Union[Load, Const, Unary, Binary, Reduce]


@dataclass(frozen=True)
class Statement:
    out: str
    dims: tuple[str, ...]
    expr: Expr

    def __str__(self) -> str:
        target = f"{self.out}[{','.join(self.dims)}]" if self.dims else self.out
        return f"{target} = {expr_text(self.expr)}"


@dataclass(frozen=True)
class Program:
    """Statements in program order. ``fused[i]`` is how many outer loops statement i shares with
    statement i-1 (loop fusion, Fig. 3.12); empty when no statement shares a loop."""

    name: str
    statements: tuple[Statement, ...]
    sizes: tuple[tuple[str, int], ...]
    fused: tuple[int, ...] = ()

    def shared(self, i: int) -> int:
        """The outer loops statement i shares with statement i-1 (0 for the first and past the last)."""
        return self.fused[i] if 0 < i < len(self.fused) else 0

    def __str__(self) -> str:
        parts = []
        for i, s in enumerate(self.statements):
            k = self.shared(i)
            parts.append((f"[fused {','.join(s.dims[:k])}] " if k else "") + str(s))
        return "; ".join(parts)


def with_fused(prog: Program, fused: Sequence[int]) -> Program:
    """The program with this loop structure (no fusion is stored as an empty tuple, so equal programs compare equal)."""
    return replace(prog, fused=tuple(fused) if any(fused) else ())


def index_text(ix: Index) -> str:
    if isinstance(ix, Iter):
        return ix.dim
    if isinstance(ix, IConst):
        return str(ix.value)
    return f"{index_text(ix.left)}{'+' if ix.op == 'add' else '*'}{index_text(ix.right)}"


def expr_text(e: Expr) -> str:
    if isinstance(e, Load):
        return f"{e.tensor}[{','.join(index_text(i) for i in e.indices)}]" if e.indices else e.tensor
    if isinstance(e, Const):
        return f"{e.value:g}"
    if isinstance(e, Unary):
        return f"{e.op}({expr_text(e.x)})"
    if isinstance(e, Binary):
        sym = {"add": "+", "mul": "*", "sub": "-", "div": "/"}.get(e.op)
        return f"({expr_text(e.left)} {sym} {expr_text(e.right)})" if sym else \
            f"{e.op}({expr_text(e.left)}, {expr_text(e.right)})"
    name = {v: k for k, v in REDUCTIONS.items()}[e.op]
    init = "" if isinstance(e.init, Const) and e.init.value == (1 if e.op == "mul" else 0) else \
        f", init={expr_text(e.init)}"
    return f"{name}({expr_text(e.body)}, {e.dim}{init})"


_IDENTITY = {"add": 0.0, "mul": 1.0, "max": float("-inf")}


def parse_program(text: str, sizes: Mapping[str, int], name: str = "program") -> Program:
    """Read ``t[i,j] = sum(a[i,k]*b[k,j], k); y[i,j] = t[i,j] + c[j]`` (statements split by ``;``).

    Reductions nest as written: ``sum(sum(x, kw), kh)`` reduces kh outermost; ``sum(x, kh, kw)`` is
    the same. ``max(a, b)``, ``exp(x)``, ``sqrt(x)`` and ``sigmoid(x)`` (= ``1 / (1 + exp(-x))``) are element-wise.
    """
    stmts = []
    for part in [p.strip() for p in text.split(";") if p.strip()]:
        try:
            tree = ast.parse(part, mode="exec").body
        except SyntaxError as e:
            raise SpecError(f"program {name!r}: cannot read statement {part!r}: {e.msg}") from None
        if len(tree) != 1 or not isinstance(tree[0], ast.Assign) or len(tree[0].targets) != 1:
            raise SpecError(f"program {name!r}: {part!r} is not one assignment 'out[dims] = expression'")
        target = tree[0].targets[0]
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            out_dims = tuple(_index(x, part) for x in _subscripts(target))
            if not all(isinstance(d, Iter) for d in out_dims):
                raise SpecError(f"program {name!r}: output indices of {part!r} must be plain dimensions")
            dims = tuple(d.dim for d in out_dims if isinstance(d, Iter))
            out = target.value.id
        elif isinstance(target, ast.Name):
            dims, out = (), target.id
        else:
            raise SpecError(f"program {name!r}: the left side of {part!r} must be a tensor like y[i,j]")
        stmts.append(Statement(out, dims, _expr(tree[0].value, part)))
    if not stmts:
        raise SpecError(f"program {name!r}: no statements in {text!r}")
    prog = Program(name, tuple(stmts), tuple((d, int(s)) for d, s in sizes.items()))
    used = {d for s in stmts for d in _dims_of(s)}
    missing = sorted(used - set(sizes))
    if missing:
        raise SpecError(f"program {name!r}: no size given for dimensions {missing} (sizes: {dict(sizes)})")
    return prog


def _subscripts(node: ast.Subscript) -> list[ast.expr]:
    sl = node.slice
    return list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]


def _index(node: ast.expr, where: str) -> Index:
    if isinstance(node, ast.Name):
        return Iter(node.id)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return IConst(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Mult):
        op = "add" if isinstance(node.op, ast.Add) else "mul"
        return IOp(op, _index(node.left, where), _index(node.right, where))
    raise SpecError(f"statement {where!r}: index {ast.unparse(node)!r} is not an affine expression of dimensions")


def _expr(node: ast.expr, where: str) -> Expr:
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        return Load(node.value.id, tuple(_index(x, where) for x in _subscripts(node)))
    if isinstance(node, ast.Name):
        return Load(node.id, ())
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return Const(float(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return Binary("sub", Const(0.0), _expr(node.operand, where))
    if isinstance(node, ast.BinOp) and type(node.op) in ELEMENTWISE_BINARY:
        return Binary(ELEMENTWISE_BINARY[type(node.op)], _expr(node.left, where), _expr(node.right, where))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        fn, args = node.func.id, node.args
        if fn in REDUCTIONS and len(args) >= 2 and all(isinstance(a, ast.Name) for a in args[1:]):
            op = REDUCTIONS[fn]
            body = _expr(args[0], where)
            for a in reversed(args[1:]):   # the first listed dimension is the outermost reduction
                assert isinstance(a, ast.Name)
                body = Reduce(op, a.id, body, Const(_IDENTITY[op]))
            return body
        if fn == "max" and len(args) == 2:
            return Binary("max", _expr(args[0], where), _expr(args[1], where))
        if fn in UNARY and len(args) == 1:
            return Unary(fn, _expr(args[0], where))
        if fn == "sigmoid" and len(args) == 1:
            x = _expr(args[0], where)
            # 1 / (1 + exp(0 - x)): negation as a subtraction, since Table 3.1 has no negate instruction
            return Binary("div", Const(1.0), Binary("add", Const(1.0), Unary("exp", Binary("sub", Const(0.0), x))))
    raise SpecError(f"statement {where!r}: cannot read {ast.unparse(node)!r}; use loads t[i,j], numbers, + - * /, "
                    f"max(a,b), exp(x), sqrt(x), sigmoid(x) and reductions {', '.join(REDUCTIONS)}(body, dim, ...)")


def _index_dims(ix: Index) -> set[str]:
    if isinstance(ix, Iter):
        return {ix.dim}
    if isinstance(ix, IConst):
        return set()
    return _index_dims(ix.left) | _index_dims(ix.right)


def _expr_dims(e: Expr) -> set[str]:
    if isinstance(e, Load):
        return set().union(*(_index_dims(i) for i in e.indices)) if e.indices else set()
    if isinstance(e, Const):
        return set()
    if isinstance(e, Unary):
        return _expr_dims(e.x)
    if isinstance(e, Binary):
        return _expr_dims(e.left) | _expr_dims(e.right)
    return {e.dim} | _expr_dims(e.body) | _expr_dims(e.init)


def _dims_of(s: Statement) -> set[str]:
    return set(s.dims) | _expr_dims(s.expr)


def program_from_operator(op: Operator) -> Program:
    """Our multiply-accumulate operator as a one-statement program: the output dimensions become
    tensor nodes (in the output's axis order), every other dimension a sum, in declaration order."""
    out = op.output
    out_dims = tuple(ix.dims[0] for ix in out.indices)
    reduced = [d for d in op.dim_names if d not in out_dims]

    def to_index(ix) -> Index:
        parts: list[Index] = [Iter(d) if c == 1 else IOp("mul", IConst(c), Iter(d)) for d, c in ix.terms]
        acc = parts[0]
        for p in parts[1:]:
            acc = IOp("add", acc, p)
        return acc

    body: Expr = Load(op.inputs[0].name, tuple(to_index(ix) for ix in op.inputs[0].indices))
    for o in op.inputs[1:]:
        body = Binary("mul", body, Load(o.name, tuple(to_index(ix) for ix in o.indices)))
    for d in reversed(reduced):
        body = Reduce("add", d, body, Const(0.0))
    if op.init_output == "read":
        body = Binary("add", Load(out.name, tuple(Iter(d) for d in out_dims)), body)
    return Program(op.name, (Statement(out.name, out_dims, body),), op.dims)


def operator_from_statement(program: Program, index: int = 0) -> Operator | None:
    """The statement as our multiply-accumulate operator (the input of the dataflow embedding), or
    None when it is not ``out[...] = sum(a[...] * b[...], dims)`` over graph inputs; the inverse of
    ``program_from_operator`` for that form. Bias, activation and scaling statements have no such form."""
    st = program.statements[index]
    body, reduced = st.expr, []
    while isinstance(body, Reduce) and body.op == "add" and isinstance(body.init, Const) and body.init.value == 0:
        reduced.append(body.dim)
        body = body.body
    produced = {s.out for s in program.statements[:index]}
    if not (isinstance(body, Binary) and body.op == "mul" and isinstance(body.left, Load)
            and isinstance(body.right, Load) and body.left.indices and body.right.indices
            and not {body.left.tensor, body.right.tensor} & produced):
        return None
    used = set(st.dims) | set(reduced)
    sizes = {d: s for d, s in program.sizes if d in used}
    text = f"{st.out}[{','.join(st.dims)}] += {expr_text(body.left)} * {expr_text(body.right)}"
    return parse_expression(text, sizes, name=f"{program.name}" + (f".{st.out}" if len(program.statements) > 1 else ""))


# The operators of Table 3.3, as programs (Attention is eq. 3.2/3.3; Conv2D is NHWC with unit stride).
THESIS_OPERATORS: dict[str, tuple[str, dict[str, int]]] = {
    "gemm": ("c[i,j] = sum(a[i,k] * b[k,j], k)", {"i": 64, "j": 64, "k": 64}),
    "fc_bias": ("t[n,j] = sum(x[n,k] * w[j,k], k); y[n,j] = t[n,j] + b[j]", {"n": 8, "j": 64, "k": 64}),
    "fc_bias_sigmoid": ("t[n,j] = sum(x[n,k] * w[j,k], k); u[n,j] = t[n,j] + b[j]; y[n,j] = sigmoid(u[n,j])",
                        {"n": 8, "j": 64, "k": 64}),
    "attention": ("t[i,j] = sum(q[i,l] * kt[l,j], l); r[i,j] = s * t[i,j]", {"i": 64, "j": 64, "l": 64}),
    "conv2d": ("y[n,h,w,c] = sum(x[n,h+kh,w+kw,ic] * f[kh,kw,ic,c], kh, kw, ic)",
               {"n": 1, "h": 14, "w": 14, "c": 32, "kh": 3, "kw": 3, "ic": 16}),
    "conv2d_relu": ("t[n,h,w,c] = sum(x[n,h+kh,w+kw,ic] * f[kh,kw,ic,c], kh, kw, ic); y[n,h,w,c] = max(t[n,h,w,c], 0)",
                    {"n": 1, "h": 14, "w": 14, "c": 32, "kh": 3, "kw": 3, "ic": 16}),
    # One routing iteration of Sabour, Frosst and Hinton's dynamic routing (2017) in Table 3.3's setting, the
    # operator the benchmark sets beside Table 3.3 (the thesis does not print its text). Table 3.1 has no
    # square root and Table 3.3's search no transposes, and the dot and matrix-vector instructions read the
    # reduced dimension innermost, so, like eq. 3.2's k^T, the operator is written for them: the host supplies
    # the squash's norm nr[j] = |s_j| (the squash factor |s|^2 / (1 + |s|^2) / |s| is nr / (1 + n2)), and
    # each tensor reduced along two different dimensions is there in both layouts: the prediction vectors
    # (the weighted sum reduces i, the agreement d) computed twice from w, and the logits given twice (bl and
    # its transpose blt; the softmax normalises along j, the weighted sum reduces along i).
    # Sizes are CapsNet's on MNIST (1152 primary capsules of 8, 10 digit capsules of 16).
    "capsule_routing": ("uh[j,d,i] = sum(w[j,d,i,e] * u[i,e], e); ut[i,j,d] = sum(w[j,d,i,e] * u[i,e], e); "
                        "eb[i,j] = exp(bl[i,j]); z[i] = sum(eb[i,j], j); ec[j,i] = exp(blt[j,i]); "
                        "c[j,i] = ec[j,i] / z[i]; s[j,d] = sum(c[j,i] * uh[j,d,i], i); "
                        "n2[j] = sum(s[j,d] * s[j,d], d); sc[j] = nr[j] / (1 + n2[j]); v[j,d] = s[j,d] * sc[j]; "
                        "ag[i,j] = sum(ut[i,j,d] * v[j,d], d); bn[i,j] = bl[i,j] + ag[i,j]",
                        {"i": 1152, "j": 10, "d": 16, "e": 8}),
    # The same iteration as written by Sabour et al., squash's square root included, one layout per tensor:
    # no Table 3.1 program computes it (no square root, and no transposes of intermediates).
    "capsule_routing_sqrt": ("uh[i,j,d] = sum(w[i,j,d,e] * u[i,e], e); eb[i,j] = exp(bl[i,j]); "
                             "z[i] = sum(eb[i,j], j); c[i,j] = eb[i,j] / z[i]; s[j,d] = sum(c[i,j] * uh[i,j,d], i); "
                             "n2[j] = sum(s[j,d] * s[j,d], d); v[j,d] = s[j,d] * sqrt(n2[j]) / (1 + n2[j]); "
                             "ag[i,j] = sum(uh[i,j,d] * v[j,d], d); bn[i,j] = bl[i,j] + ag[i,j]",
                             {"i": 1152, "j": 10, "d": 16, "e": 8}),
}


def routing_host_inputs(program: Program, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inputs of ``capsule_routing`` as the host supplies them for Sabour et al.'s routing: ``blt`` the
    transpose of the logits ``bl``, and the squash's norm ``nr[j] = |s_j|`` (from ``s``, which does not read
    ``nr``). With them the operator's ``v`` and ``bn`` are the routing's, square root and all."""
    out = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
    out["blt"] = out["bl"].T.copy()
    out["nr"] = np.zeros(dict(program.sizes)["j"])
    out["nr"] = np.sqrt(evaluate(program, out)["n2"])
    return out


def thesis_program(name: str) -> Program:
    if name not in THESIS_OPERATORS:
        raise SpecError(f"unknown operator {name!r}; known: {', '.join(THESIS_OPERATORS)}", where="--workload")
    text, sizes = THESIS_OPERATORS[name]
    return parse_program(text, sizes, name)


def transposed_name(tensor: str, perm: tuple[int, ...]) -> str:
    """The name of a transposed copy: axis k of ``x^T10`` is axis perm[k] of ``x``."""
    return f"{tensor}^T{''.join(map(str, perm))}"


def tensor_array(program: Program, name: str, inputs: Mapping[str, np.ndarray],
                 computed: Mapping[str, np.ndarray]) -> np.ndarray:
    """The array a load reads: a computed intermediate, an input, or a transposed copy of an input."""
    if name in computed:
        return computed[name]
    base, _, perm = name.partition("^T")
    if base not in inputs:
        raise SpecError(f"program {program.name!r}: no input array for tensor {base!r}")
    arr = np.asarray(inputs[base], dtype=np.float64)
    return arr.transpose([int(c) for c in perm]) if perm else arr


def evaluate(program: Program, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a program with NumPy (the reference semantics the rewrites must keep).

    Transposed copies (``x^T10``) are read from the input they copy; every array is indexed with
    the affine index expressions, so inputs must be large enough (e.g. H+KH-1 rows for a conv)."""
    sizes = dict(program.sizes)
    order = list(sizes)
    env: dict[str, np.ndarray] = {}

    def axis(d: str) -> np.ndarray:
        shape = [1] * len(order)
        shape[order.index(d)] = sizes[d]
        return np.arange(sizes[d]).reshape(shape)

    def idx(ix: Index) -> np.ndarray | int:
        if isinstance(ix, Iter):
            return axis(ix.dim)
        if isinstance(ix, IConst):
            return ix.value
        a, b = idx(ix.left), idx(ix.right)
        return a + b if ix.op == "add" else a * b

    def array(name: str) -> np.ndarray:
        return tensor_array(program, name, inputs, env)

    def ev(e: Expr) -> np.ndarray:
        if isinstance(e, Load):
            arr = array(e.tensor)
            if not e.indices:
                return arr.reshape([1] * len(order))
            return arr[tuple(np.broadcast_arrays(*[np.asarray(idx(i)) for i in e.indices]))] \
                if len(e.indices) > 1 else arr[np.asarray(idx(e.indices[0]))]
        if isinstance(e, Const):
            return np.full([1] * len(order), e.value)
        if isinstance(e, Unary):
            return UNARY[e.op](ev(e.x))
        if isinstance(e, Binary):
            a, b = ev(e.left), ev(e.right)
            ops = {"add": np.add, "mul": np.multiply, "sub": np.subtract, "div": np.divide, "max": np.maximum}
            return np.asarray(ops[e.op](a, b))
        raw = ev(e.body)
        body = np.broadcast_to(raw, [sizes[d] if d == e.dim else n for d, n in zip(order, raw.shape, strict=True)])
        k = order.index(e.dim)
        if e.op == "add":
            return np.sum(body, axis=k, keepdims=True) + ev(e.init)
        if e.op == "mul":
            return np.prod(body, axis=k, keepdims=True) * ev(e.init)
        return np.maximum(np.max(body, axis=k, keepdims=True), ev(e.init))

    for st in program.statements:
        v = ev(st.expr)
        full = np.broadcast_to(v, [sizes[d] if d in st.dims else 1 for d in order])
        kept = full.reshape([sizes[d] for d in order if d in st.dims])
        present = [d for d in order if d in st.dims]
        env[st.out] = np.ascontiguousarray(kept.transpose([present.index(d) for d in st.dims]))
    return env


# ---------------------------------------------------------------- the tree

@dataclass
class Node:
    kind: str                 # tensor | reduction | compute | input | access
    label: str                # kind plus what must be equal for a match (op, iterator distance, ...)
    text: str                 # for printing
    children: list["Node"] = field(default_factory=list)   # right to left: children[0] is the right child
    parent: "Node | None" = None
    index: int = -1           # position in right-to-left pre-order
    defines: str | None = None   # tensor/reduction: the iterator it defines
    producer: "Node | None" = None   # input: the root tensor node of the statement that wrote it (edge in D)
    owner: "Node | None" = None      # iterator access: the tensor/reduction node defining it (edge in I)
    value: float | None = None       # an immediate constant's value
    tensor: str | None = None        # input: the tensor it reads; tensor node: the statement's output
    pos: int = 0                     # child index under the parent, right to left
    depth: int = 0


@dataclass
class TCG:
    """A tensor compute graph: ``nodes`` in right-to-left pre-order, ``nodes[0]`` the root.

    ``levels[i]`` are the pre-order indices of statement i's tensor nodes, outermost first (loops
    it shares with its neighbours included)."""

    program: Program
    nodes: list[Node]
    levels: tuple[tuple[int, ...], ...] = ()

    @property
    def root(self) -> Node:
        return self.nodes[0]

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def algebraic(self) -> list[Node]:
        """The compute and reduction nodes: what a solution must cover completely."""
        return [n for n in self.nodes if n.kind in ("compute", "reduction")]

    def pretty(self) -> str:
        lines: list[str] = []

        def walk(n: Node, depth: int, edge: str) -> None:
            lines.append(f"{n.index:>3} {'  ' * depth}{edge}{n.text}")
            for k, c in enumerate(n.children):
                edge_name = {("tensor", 0): "R: ", ("tensor", 1): "L: ", ("reduction", 0): "init: ",
                             ("reduction", 1): "in: "}.get((n.kind, k), f"{k}: ")
                walk(c, depth + 1, edge_name)

        walk(self.root, 0, "")
        return "\n".join(lines)


def build_tcg(program: Program) -> TCG:
    """The TCG of a program (the tree of Fig. 3.2 with iterator references as upward distances).

    A statement fused into its predecessor (``program.fused``) reuses the predecessor's outer tensor
    nodes; below the last shared one its own first tensor node is the right child, with the
    predecessor's remaining loops as its left child (the preceding computation, Fig. 3.12)."""
    nodes: list[Node] = []
    producers: dict[str, Node] = {}
    nest_top: Node | None = None            # outermost tensor node of the current loop nest
    prev_levels: list[Node] = []
    all_levels: list[list[Node]] = []
    for si, st in enumerate(program.statements):
        k = program.shared(si)
        if k and not (0 < si and k < len(st.dims) and k < len(program.statements[si - 1].dims)):
            raise SpecError(f"program {program.name!r}: statement '{st}' cannot share {k} loops with the previous "
                            f"statement; each must keep a loop of its own below the shared ones")
        scope: dict[str, Node] = dict(zip(st.dims[:k], prev_levels[:k], strict=True))
        shared = prev_levels[:k]
        for shared_node in shared:
            shared_node.text += f",{st.out}"
        own = [Node("tensor", "T", f"tensor {st.out}:{d}", defines=d, tensor=st.out)
               for d in st.dims[k:] or ("_",)]   # a scalar result is a 1-D tensor of length 1
        if st.dims:
            scope.update(zip(st.dims[k:], own, strict=True))
        try:
            body = _build_expr(st.expr, scope, producers)
        except SpecError as e:
            raise SpecError(f"program {program.name!r}, statement '{st}': {e}") from None
        for outer, inner in zip(own, own[1:] + [body], strict=True):
            _attach(outer, inner, 0)
        own_top = own[0]
        if shared:
            # under the shared loops the predecessor's remaining loops precede this statement (left child)
            rest = shared[-1].children[0]
            shared[-1].children[0] = own_top
            own_top.parent, own_top.pos = shared[-1], 0
            _attach(own_top, rest, 1)
        else:
            if nest_top is not None:
                _attach(own_top, nest_top, 1)
            nest_top = own_top
        levels = shared + own
        producers[st.out] = own_top
        prev_levels = levels
        all_levels.append(levels)
    assert nest_top is not None
    _number(nest_top, nodes)
    return TCG(program, nodes, tuple(tuple(n.index for n in lv) for lv in all_levels))


def _attach(parent: Node, child: Node, pos: int) -> None:
    if pos != len(parent.children):
        raise AssertionError(f"children are attached right to left: {pos} after {len(parent.children)}")
    parent.children.append(child)
    child.parent = parent
    child.pos = pos


def _build_expr(e: Expr, scope: dict[str, Node], producers: dict[str, Node]) -> Node:
    if isinstance(e, Const):
        return Node("input", "K", f"const {e.value:g}", value=e.value)
    if isinstance(e, Load):
        n = Node("input", "I", f"input {e.tensor}" + (" (dep)" if e.tensor in producers else ""),
                 producer=producers.get(e.tensor), tensor=e.tensor)
        # right to left: the innermost dimension is child 0
        for k, ix in enumerate(reversed(e.indices)):
            _attach(n, _build_index(ix, scope), k)
        return n
    if isinstance(e, Unary):
        n = Node("compute", f"C{e.op}", f"compute {e.op}")
        _attach(n, _build_expr(e.x, scope, producers), 0)
        return n
    if isinstance(e, Binary):
        n = Node("compute", f"C{e.op}", f"compute {e.op}")
        _attach(n, _build_expr(e.right, scope, producers), 0)
        _attach(n, _build_expr(e.left, scope, producers), 1)
        return n
    r = Node("reduction", f"R{e.op}", f"reduction {e.op}:{e.dim}", defines=e.dim)
    _attach(r, _build_expr(e.init, scope, producers), 0)
    _attach(r, _build_expr(e.body, dict(scope, **{e.dim: r}), producers), 1)
    return r


def _build_index(ix: Index, scope: dict[str, Node]) -> Node:
    if isinstance(ix, Iter):
        if ix.dim not in scope:
            raise SpecError(f"index {ix.dim!r} is neither an output dimension nor a reduction around its use")
        return Node("access", "A?", f"access {ix.dim}", owner=scope[ix.dim])
    if isinstance(ix, IConst):
        return Node("access", f"A={ix.value}", f"access {ix.value}")
    n = Node("access", f"A{ix.op}", f"access {ix.op}")
    _attach(n, _build_index(ix.right, scope), 0)
    _attach(n, _build_index(ix.left, scope), 1)
    return n


def _number(root: Node, out: list[Node]) -> None:
    stack = [root]
    while stack:
        n = stack.pop()
        n.index = len(out)
        n.depth = n.parent.depth + 1 if n.parent is not None else 0
        out.append(n)
        stack.extend(reversed(n.children))
    # iterator references become upward path lengths (the thesis' "P" moves folded into an integer)
    for n in out:
        if n.owner is not None:
            steps, p = 0, n
            while p is not n.owner:
                assert p.parent is not None
                p, steps = p.parent, steps + 1
            n.label = f"A^{steps}"
