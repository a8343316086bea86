"""A small compute DSL for subgraphs, one definition per line (TVM's ``te.compute`` in text).

    name fig3
    param H = 64
    input A[H, 64] int32
    A1[h:H, w:64] = A[h, w] + 1
    C[h:H-2, w:62] = sum(A1[h+kh, w+kw] * B[kh, kw], kh=3, kw=3)
    E[h:H-2, w:62] = max(abs(C[h, w]), 0)

A definition names its output dims with their extents (``h:H``); ``sum(body, k=K, ...)`` is a
reduction over new dims. Expressions: ``+ - * /``, ``max min abs``, ``select(a == b, x, y)``,
``cast(x, float16)``, integer and float constants, and loop dims as values (one-hot). Indices
are affine: sums of ``c*dim`` and constants. Shapes may use params and ``+ - * //``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from accelmap.errors import SpecError
from accelmap.poly.kernel import (
    DTYPES,
    Access,
    Affine,
    Call,
    Const,
    Expr,
    Iter,
    Kernel,
    Statement,
    Tensor,
    check_kernel,
    is_float,
    reduction_statements,
)

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_CMPOPS = {ast.Eq: "==", ast.Lt: "<", ast.Gt: ">", ast.LtE: "<=", ast.GtE: ">="}


class _Parser:
    def __init__(self, where: str):
        self.where = where
        self.line = 0
        self.params: dict[str, int] = {}
        self.name = "subgraph"
        self.inputs: list[Tensor] = []
        self.computed: list[Tensor] = []
        self.statements: list[Statement] = []

    def err(self, msg: str) -> SpecError:
        return SpecError(f"line {self.line}: {msg}", where=self.where)

    # ---- integers (shapes, extents) ----------------------------------
    def int_expr(self, node: ast.expr) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in self.params:
                raise self.err(f"unknown param {node.id!r} in a size (params: {', '.join(self.params) or 'none'})")
            return self.params[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv):
            a, b = self.int_expr(node.left), self.int_expr(node.right)
            if isinstance(node.op, ast.FloorDiv):
                if b == 0:
                    raise self.err("division by zero in a size")
                return a // b
            return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
        raise self.err(f"a size must be an integer expression of params, got {ast.unparse(node)!r}")

    def positive(self, node: ast.expr, what: str) -> int:
        v = self.int_expr(node)
        if v < 1:
            raise self.err(f"{what} must be a positive integer, got {ast.unparse(node)} = {v}")
        return v

    # ---- affine indices ------------------------------------------------
    def affine(self, node: ast.expr, dims: dict[str, int]) -> Affine:
        coeffs: dict[str, int] = {}
        const = 0

        def walk(n: ast.expr, sign: int) -> None:
            nonlocal const
            if isinstance(n, ast.Constant) and isinstance(n.value, int):
                const += sign * n.value
            elif isinstance(n, ast.Name) and n.id in dims:
                coeffs[n.id] = coeffs.get(n.id, 0) + sign
            elif isinstance(n, ast.Name) and n.id in self.params:
                const += sign * self.params[n.id]
            elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
                walk(n.operand, -sign)
            elif isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub)):
                walk(n.left, sign)
                walk(n.right, sign if isinstance(n.op, ast.Add) else -sign)
            elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
                for c, v in ((n.left, n.right), (n.right, n.left)):
                    try:
                        k = self.int_expr(c)
                    except SpecError:
                        continue
                    walk(v, sign * k)
                    return
                raise self.err(f"index {ast.unparse(node)!r} is not affine (a product of two dims)")
            else:
                raise self.err(f"index {ast.unparse(node)!r}: {ast.unparse(n)!r} is not a loop dim "
                               f"({', '.join(dims)}), param or integer")

        walk(node, 1)
        return Affine(tuple((d, c) for d, c in coeffs.items() if c), const)

    # ---- expressions ---------------------------------------------------
    def expr(self, node: ast.expr, dims: dict[str, int]) -> tuple[Expr, str]:
        """An expression and its dtype ("" for a constant, which adopts its partner's)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            return Const(node.value), ""
        if isinstance(node, ast.Name):
            if node.id in dims:
                return Iter(node.id), "int32"
            if node.id in self.params:
                return Const(self.params[node.id]), ""
            raise self.err(f"unknown name {node.id!r} (loop dims: {', '.join(dims)})")
        if isinstance(node, ast.Subscript):
            return self.access(node, dims)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            e, t = self.expr(node.operand, dims)
            return Call("neg", (e,)), t
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            (a, ta), (b, tb) = self.expr(node.left, dims), self.expr(node.right, dims)
            t = self.join(ta, tb)
            if isinstance(node.op, ast.Div) and not is_float(t or "float32"):
                raise self.err(f"'/' on {t} values in {ast.unparse(node)!r}: integer division is not supported; "
                               "cast to float32 first")
            return Call(_BINOPS[type(node.op)], (a, b)), t
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMPOPS:
            (a, ta), (b, tb) = self.expr(node.left, dims), self.expr(node.comparators[0], dims)
            self.join(ta, tb)
            return Call(_CMPOPS[type(node.ops[0])], (a, b)), "bool"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            fn = node.func.id
            if node.keywords:
                raise self.err(f"{fn}() takes no keywords here (only a top-level sum(...) or max(...) reduces)")
            if fn in ("max", "min") and len(node.args) == 2:
                (a, ta), (b, tb) = (self.expr(x, dims) for x in node.args)
                return Call(fn, (a, b)), self.join(ta, tb)
            if fn == "abs" and len(node.args) == 1:
                e, t = self.expr(node.args[0], dims)
                return Call("abs", (e,)), t
            if fn in ("sqrt", "exp") and len(node.args) == 1:
                e, t = self.expr(node.args[0], dims)
                if not is_float(t or "float32"):
                    raise self.err(f"{fn}() of {t} values in {ast.unparse(node)!r}; cast to float32 first")
                return Call(fn, (e,)), t
            if fn == "cast" and len(node.args) == 2 and isinstance(node.args[1], ast.Name):
                target = node.args[1].id
                if target not in DTYPES:
                    raise self.err(f"cast to unknown dtype {target!r}; valid: {', '.join(DTYPES)}")
                e, _ = self.expr(node.args[0], dims)
                return Call("cast", (e,), target), target
            if fn == "select" and len(node.args) == 3:
                c, tc = self.expr(node.args[0], dims)
                if tc != "bool":
                    raise self.err(f"select's first argument must be a comparison, got {ast.unparse(node.args[0])!r}")
                (a, ta), (b, tb) = (self.expr(x, dims) for x in node.args[1:])
                return Call("select", (c, a, b)), self.join(ta, tb)
            raise self.err(f"unknown call {ast.unparse(node)!r}; use max(a,b), min(a,b), abs(x), sqrt(x), exp(x), "
                           "cast(x, dtype), "
                           "select(cmp, a, b), or a top-level sum(body, dim=extent, ...)")
        raise self.err(f"unsupported expression {ast.unparse(node)!r}")

    def join(self, a: str, b: str) -> str:
        if "bool" in (a, b):
            raise self.err("a comparison can only be select's condition")
        if not a or not b or a == b:
            return a or b
        if is_float(a) != is_float(b):
            raise self.err(f"mixing {a} and {b}; cast one of them explicitly")
        return a if DTYPES[a][1] >= DTYPES[b][1] else b

    def access(self, node: ast.Subscript, dims: dict[str, int]) -> tuple[Access, str]:
        if not isinstance(node.value, ast.Name):
            raise self.err(f"tensor access {ast.unparse(node)!r} must name a tensor")
        tensors = {t.name: t for t in self.inputs + self.computed}
        name = node.value.id
        if name not in tensors:
            raise self.err(f"tensor {name!r} is used before it is defined (known: {', '.join(tensors) or 'none'})")
        idx = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        t = tensors[name]
        if len(idx) != len(t.shape):
            raise self.err(f"{ast.unparse(node)!r} has {len(idx)} indices; {name} has {len(t.shape)} axes")
        return Access(name, tuple(self.affine(i, dims) for i in idx)), t.dtype

    # ---- lines ---------------------------------------------------------
    def parse_line(self, text: str) -> None:
        words = text.split(None, 1)
        if words[0] == "name":
            self.name = words[1].strip() if len(words) > 1 else self.name
            return
        if words[0] == "param":
            try:
                node = ast.parse(words[1] if len(words) > 1 else "").body[0]
            except SyntaxError as e:
                raise self.err(f"cannot parse param {text!r}: {e.msg}") from None
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                raise self.err(f"param takes 'param NAME = integer', got {text!r}")
            self.params[node.targets[0].id] = self.int_expr(node.value)
            return
        if words[0] == "input":
            rest = words[1].rsplit(None, 1) if len(words) > 1 else []
            if len(rest) != 2 or rest[1] not in DTYPES:
                raise self.err(f"input takes 'input NAME[shape] DTYPE' with DTYPE one of {', '.join(DTYPES)}, "
                               f"got {text!r}")
            try:
                decl = ast.parse(rest[0], mode="eval").body
            except SyntaxError as e:
                raise self.err(f"cannot parse {rest[0]!r}: {e.msg}") from None
            if not (isinstance(decl, ast.Subscript) and isinstance(decl.value, ast.Name)):
                raise self.err(f"input takes 'input NAME[shape] DTYPE', got {text!r}")
            idx = decl.slice.elts if isinstance(decl.slice, ast.Tuple) else [decl.slice]
            shape = tuple(self.positive(i, f"extent of {decl.value.id}") for i in idx)
            if decl.value.id in {t.name for t in self.inputs + self.computed}:
                raise self.err(f"tensor {decl.value.id!r} is defined twice")
            self.inputs.append(Tensor(decl.value.id, shape, rest[1]))
            return
        self.definition(text)

    def definition(self, text: str) -> None:
        try:
            node = ast.parse(text).body[0]
        except SyntaxError as e:
            raise self.err(f"cannot parse {text!r}: {e.msg}") from None
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Subscript) and isinstance(node.targets[0].value, ast.Name)):
            raise self.err(f"expected 'OUT[d0:N0, ...] = expression', got {text!r}")
        target = node.targets[0]
        assert isinstance(target.value, ast.Name)
        out_name = target.value.id
        slices = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
        dims: dict[str, int] = {}
        for s in slices:
            if not (isinstance(s, ast.Slice) and isinstance(s.lower, ast.Name) and s.upper is not None
                    and s.step is None):
                raise self.err(f"output axes are written dim:extent (e.g. h:64), got {ast.unparse(s)!r}")
            if s.lower.id in dims or s.lower.id in self.params:
                raise self.err(f"output dim {s.lower.id!r} is used twice or names a param")
            dims[s.lower.id] = self.positive(s.upper, f"extent of {s.lower.id}")
        value = node.value
        reduce: dict[str, int] = {}
        combine = "+"
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.keywords \
                and value.func.id == "max":   # max(body, k=K): a max reduction
            combine = "max"
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and (value.func.id == "sum"
                                                                               or combine == "max"):
            if len(value.args) != 1 or not value.keywords:
                raise self.err(f"{value.func.id} takes the body and its reduction dims: "
                               f"{value.func.id}(body, k=K, ...)")
            for kw in value.keywords:
                if kw.arg is None or kw.arg in dims or kw.arg in reduce:
                    raise self.err(f"reduction dim {kw.arg!r} repeats another dim")
                reduce[kw.arg] = self.positive(kw.value, f"extent of reduction dim {kw.arg}")
            value = value.args[0]
        all_dims = {**dims, **reduce}
        body, dtype = self.expr(value, all_dims)
        if dtype == "bool":
            raise self.err("a definition cannot store a comparison; wrap it in select(cmp, 1, 0)")
        dtype = dtype or "int32"
        out = Tensor(out_name, tuple(dims.values()), dtype)
        if out_name in {t.name for t in self.inputs + self.computed}:
            raise self.err(f"tensor {out_name!r} is defined twice; each tensor is written by one definition")
        self.computed.append(out)
        out_access = Access(out_name, tuple(Affine(((d, 1),)) for d in dims))
        n = len(self.statements)
        if reduce:
            self.statements += reduction_statements(out_name, tuple(dims.items()), out_access, body, dtype,
                                                    tuple(reduce.items()), n, combine)
        else:
            self.statements.append(Statement(f"S{n}", tuple(dims.items()), out_access, body, "assign"))


def parse_subgraph(text: str, where: str = "<subgraph>") -> Kernel:
    """A kernel from DSL text; errors name ``where`` and the line."""
    p = _Parser(where)
    for i, raw in enumerate(text.splitlines(), 1):
        p.line = i
        line = raw.split("#", 1)[0].strip()
        if line:
            p.parse_line(line)
    k = Kernel(p.name, tuple(p.inputs), tuple(p.computed), tuple(p.statements))
    check_kernel(k, where)
    return k


def load_subgraph(path: str | Path) -> Kernel:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise SpecError(f"cannot read the subgraph file: {e.strerror}", where=str(p)) from None
    return parse_subgraph(text, str(p))
