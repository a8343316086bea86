"""The compute IR of a fused subgraph: tensors, and statements with affine accesses.

A subgraph is a list of tensor definitions in the style of TVM's ``te.compute`` (the input
of AKG, Zhao et al., PLDI 2021, Sec. 3). Every definition becomes one polyhedral statement,
or two for a reduction (an init statement writing zero, then the update ``out += body``),
as in the paper's running example (its S1 and S2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from accelmap.errors import SpecError

CUBE = 16   # fractal size f: the cube multiplies 16x16 by 16x16 blocks

# dtype name -> (C type, bytes, NumPy dtype). fp16 is computed in C float and compared with a tolerance.
DTYPES: dict[str, tuple[str, int, str]] = {
    "int8": ("signed char", 1, "int8"),
    "int16": ("short", 2, "int16"),
    "int32": ("int", 4, "int32"),
    "int64": ("long long", 8, "int64"),
    "float16": ("float", 2, "float16"),
    "float32": ("float", 4, "float32"),
}


def is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def dtype_bytes(dtype: str) -> int:
    return DTYPES[dtype][1]


@dataclass(frozen=True)
class Affine:
    """An index ``sum(coeff * atom) + const``; an atom is a loop dimension or a ``FloorDiv`` (a quasi-affine
    quotient or remainder, as in Eq. 1's fractal index of img2col)."""

    terms: tuple[tuple[str | FloorDiv, int], ...]
    const: int = 0

    @property
    def dims(self) -> tuple[str, ...]:
        out: list[str] = []
        for d, _ in self.terms:
            out += [d] if isinstance(d, str) else list(d.inner.dims)
        return tuple(out)

    def isl(self) -> str:
        parts = [_atom_isl(d) if c == 1 else f"{c}*{_atom_isl(d)}" for d, c in self.terms if c]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")

    def c(self, prefix: str = "") -> str:
        """For a C macro body: every dim parenthesized, as the macro's argument may be a sum."""
        parts = [f"({_atom_c(d, prefix)})" if c == 1 else f"{c} * ({_atom_c(d, prefix)})" for d, c in self.terms if c]
        return " + ".join(parts + [str(self.const)] if self.const or not parts else parts)

    def evaluate(self, env: dict[str, np.ndarray]) -> np.ndarray | int:
        out: np.ndarray | int = self.const
        for d, c in self.terms:
            out = out + c * (env[d] if isinstance(d, str) else d.evaluate(env))
        return out

    def __str__(self) -> str:
        return self.isl()


@dataclass(frozen=True)
class FloorDiv:
    """``floor(inner / divisor)``, or with ``remainder`` ``inner mod divisor``. In a domain the indices it
    takes are non-negative, so C's ``/`` and ``%`` agree with the floor semantics of isl and NumPy."""

    inner: Affine
    divisor: int
    remainder: bool = False

    def evaluate(self, env: dict[str, np.ndarray]) -> np.ndarray | int:
        v = self.inner.evaluate(env)
        return v % self.divisor if self.remainder else v // self.divisor


def _atom_isl(d: str | FloorDiv) -> str:
    if isinstance(d, str):
        return d
    if d.remainder:
        return f"(({d.inner.isl()}) mod {d.divisor})"
    return f"floor(({d.inner.isl()})/{d.divisor})"


def _atom_c(d: str | FloorDiv, prefix: str) -> str:
    if isinstance(d, str):
        return prefix + d
    return f"({d.inner.c(prefix)}) {'%' if d.remainder else '/'} {d.divisor}"


@dataclass(frozen=True)
class Access:
    tensor: str
    index: tuple[Affine, ...]

    def dims_used(self) -> tuple[str, ...]:
        return tuple(d for ix in self.index for d in ix.dims)

    def __str__(self) -> str:
        return f"{self.tensor}[{', '.join(map(str, self.index))}]"


@dataclass(frozen=True)
class Const:
    value: int | float

    def __str__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True)
class Iter:
    """The value of a loop dimension used as data (one-hot compares it with an index)."""

    dim: str

    def __str__(self) -> str:
        return self.dim


@dataclass(frozen=True)
class Call:
    """An operation: binary ``+ - * / max min == < > <= >=``, unary ``neg abs sqrt exp``, ``select``, ``cast``."""

    op: str
    args: tuple[Expr, ...]
    dtype: str = ""   # the target of a cast

    def __str__(self) -> str:
        if self.op in BINARY_OPS and self.op not in ("max", "min"):
            return f"({self.args[0]} {self.op} {self.args[1]})"
        extra = f", {self.dtype}" if self.op == "cast" else ""
        return f"{self.op}({', '.join(map(str, self.args))}{extra})"


Expr = Union[Access, Const, Iter, Call]
BINARY_OPS = ("+", "-", "*", "/", "max", "min", "==", "<", ">", "<=", ">=")
UNARY_OPS = ("neg", "abs", "sqrt", "exp")


def accesses(e: Expr) -> list[Access]:
    if isinstance(e, Access):
        return [e]
    if isinstance(e, Call):
        return [a for x in e.args for a in accesses(x)]
    return []


def strip_casts(e: Expr) -> Expr:
    while isinstance(e, Call) and e.op == "cast":
        e = e.args[0]
    return e


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def bytes(self) -> int:
        return int(np.prod(self.shape)) * dtype_bytes(self.dtype)

    def __str__(self) -> str:
        return f"{self.name}[{', '.join(map(str, self.shape))}] {self.dtype}"


@dataclass(frozen=True)
class Statement:
    """One polyhedral statement: ``out[dims of out] (=|+=) body`` over the box ``dims``.

    ``kind`` is "assign" (elementwise, broadcast, transpose, ...), "init" (a reduction's
    zero, or the lowest value for a max) or "update" (a reduction step ``out = combine(out, body)``;
    ``reduce_dims`` are the dims not indexing ``out``; ``combine`` is "+" or "max").
    """

    name: str
    dims: tuple[tuple[str, int], ...]
    out: Access
    body: Expr
    kind: str
    reduce_dims: tuple[str, ...] = ()
    combine: str = "+"

    @property
    def dim_names(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.dims)

    @property
    def reads(self) -> list[Access]:
        return accesses(self.body) + ([self.out] if self.kind == "update" else [])

    def domain_isl(self) -> str:
        cons = " and ".join(f"0 <= {d} < {n}" for d, n in self.dims)
        return f"{self.name}[{', '.join(self.dim_names)}] : {cons}" if self.dims else f"{self.name}[]"

    def text(self) -> str:
        eq = ("+=" if self.combine == "+" else f"{self.combine}=") if self.kind == "update" else "="
        return f"{self.name}: {self.out} {eq} {self.body}   for {', '.join(f'{d}<{n}' for d, n in self.dims)}"

    @property
    def is_cube(self) -> bool:
        """A dot-product reduction of two tensors: AKG sends these to the cube unit (Sec. 2)."""
        if self.kind != "update" or self.combine != "+":
            return False
        b = strip_casts(self.body)
        if not (isinstance(b, Call) and b.op == "*" and self.reduce_dims):
            return False
        x, y = (strip_casts(a) for a in b.args)
        if not (isinstance(x, Access) and isinstance(y, Access)) or x == y:
            return False   # a square (sum of X*X) is a vector reduction, not a matrix product
        # a contraction: some reduction dim indexes both operands
        return bool(set(self.reduce_dims) & set(x.dims_used()) & set(y.dims_used()))

    def contraction_dims(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """A cube statement's dims as a matrix product's (batch, M, N, K): batch dims index the output and
        both operands, M the output and the first operand only, N the output and the second only, K are the
        reduction dims. The timing model counts 16x16x16 blocks over these and the code generator walks
        them with block ``mmad`` calls (one definition for both)."""
        body = strip_casts(self.body)
        assert self.is_cube and isinstance(body, Call)
        a, b = (strip_casts(x) for x in body.args)
        assert isinstance(a, Access) and isinstance(b, Access)
        in_a, in_b = set(a.dims_used()), set(b.dims_used())
        out = [d for d in self.dim_names if d in set(self.out.dims_used())]
        return (tuple(d for d in out if d in in_a and d in in_b),
                tuple(d for d in out if d in in_a and d not in in_b),
                tuple(d for d in out if d in in_b and d not in in_a),
                tuple(self.reduce_dims))


REDUCTIONS = ("+", "max")


def reduction_statements(name: str, dims: tuple[tuple[str, int], ...], out: Access, body: Expr, dtype: str,
                         reduce: tuple[tuple[str, int], ...], first: int, combine: str = "+") -> list[Statement]:
    """A reduction's init (the combine's identity: 0, or the dtype's lowest value for a max) and update,
    numbered ``S<first>`` and ``S<first + 1>``."""
    if combine not in REDUCTIONS:
        raise SpecError(f"reduction {combine!r} is not one of {', '.join(REDUCTIONS)}", where=name)
    identity: int | float = 0
    if combine == "max":
        identity = float("-inf") if is_float(dtype) else int(np.iinfo(DTYPES[dtype][2]).min)
    return [Statement(f"S{first}", dims, out, Const(identity), "init"),
            Statement(f"S{first + 1}", dims + reduce, out, body, "update", tuple(d for d, _ in reduce), combine)]


@dataclass(frozen=True)
class Kernel:
    """A subgraph: input tensors, computed tensors, statements in program order."""

    name: str
    inputs: tuple[Tensor, ...]
    computed: tuple[Tensor, ...]
    statements: tuple[Statement, ...]
    # computed tensors that are results even though a later definition reads them (an ONNX subgraph's
    # output that is also consumed inside the subgraph)
    results: tuple[str, ...] = ()
    # an external schedule tree (isl's text form) used instead of the isl scheduler: the fractal GEMM of
    # img2col convolution (Sec. 4.5 grafts a prebuilt tree); compile_subgraph checks it against the dependences
    external_schedule: str = ""

    @property
    def tensors(self) -> dict[str, Tensor]:
        return {t.name: t for t in self.inputs + self.computed}

    @property
    def live_out(self) -> tuple[Tensor, ...]:
        """Computed tensors no other definition reads: the subgraph's results."""
        read_by_other: set[str] = set()
        for s in self.statements:
            for a in accesses(s.body):
                if a.tensor != s.out.tensor:
                    read_by_other.add(a.tensor)
        return tuple(t for t in self.computed if t.name not in read_by_other or t.name in self.results)

    def layout_statements(self) -> set[str]:
        """Statements the MTE runs, not the vector unit (Sec. 2: the MTE does img2col on the way to the cube):
        copies of an input tensor, or constant fills, into a tensor that only cube statements read."""
        cube_read: set[str] = set()
        other_read: set[str] = set()
        for s in self.statements:
            for a in accesses(s.body):
                (cube_read if s.is_cube else other_read).add(a.tensor)
        inputs = {t.name for t in self.inputs}
        return {s.name for s in self.statements if s.kind == "assign" and s.out.tensor in cube_read
                and s.out.tensor not in other_read
                and (isinstance(s.body, Const) or (isinstance(s.body, Access) and s.body.tensor in inputs))}

    def writer(self, tensor: str) -> list[Statement]:
        return [s for s in self.statements if s.out.tensor == tensor]

    def statement(self, name: str) -> Statement:
        for s in self.statements:
            if s.name == name:
                return s
        raise KeyError(name)

    def __str__(self) -> str:
        lines = [f"subgraph {self.name}"]
        lines += [f"  input {t}" for t in self.inputs]
        lines += [f"  {s.text()}" for s in self.statements]
        lines.append("  live-out: " + ", ".join(t.name for t in self.live_out))
        return "\n".join(lines)


def check_kernel(k: Kernel, where: str) -> None:
    names = [t.name for t in k.inputs + k.computed]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SpecError(f"tensor {dup[0]} is defined twice; each tensor is written by one definition", where=where)
    if not k.statements:
        raise SpecError("the subgraph computes nothing; write at least one definition", where=where)
