"""The text form of an operator: ``O[n,k,p,q] += I[n,c,2*p+r,2*q+s] * W[k,c,r,s]``.

Any number of input factors is allowed, so tensor-algebra kernels (MTTKRP,
TTMc, SDDMM, chained matmul, TCL) are written the same way as a convolution.
"""

from __future__ import annotations

import re
from typing import Mapping

from accelmap.errors import SpecError
from accelmap.workload.operator import AffineIndex, InitOutput, Operator, make_operand

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z_0-9]*)|(\+=|[\[\],*+=]))")


def _tokens(text: str) -> list[str]:
    pos, out = 0, []
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos or m.lastindex is None:
            raise SpecError(f"cannot read the expression at column {pos + 1}: {text[pos:pos + 12]!r}")
        out.append(m.group(m.lastindex))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expect: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            raise SpecError(f"expression {self.text!r} ends early" + (f"; expected {expect!r}" if expect else ""))
        if expect is not None and tok != expect:
            raise SpecError(f"expression {self.text!r}: expected {expect!r}, found {tok!r}")
        self.i += 1
        return tok

    def name(self) -> str:
        tok = self.take()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", tok):
            raise SpecError(f"expression {self.text!r}: expected a name, found {tok!r}")
        return tok

    def term(self) -> tuple[str, int]:
        tok = self.take()
        if tok.isdigit():
            self.take("*")
            return self.name(), int(tok)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", tok):
            raise SpecError(f"expression {self.text!r}: expected a dimension, found {tok!r}")
        if self.peek() == "*" and self.i + 1 < len(self.toks) and self.toks[self.i + 1].isdigit():
            self.take("*")
            return tok, int(self.take())
        return tok, 1

    def index(self) -> AffineIndex:
        terms = [self.term()]
        while self.peek() == "+":
            self.take("+")
            terms.append(self.term())
        return AffineIndex(tuple(terms))

    def access(self) -> tuple[str, list[AffineIndex]]:
        name = self.name()
        self.take("[")
        idx = [self.index()]
        while self.peek() == ",":
            self.take(",")
            idx.append(self.index())
        self.take("]")
        return name, idx


def parse_expression(text: str, sizes: Mapping[str, int], *, name: str = "op",
                     bits: Mapping[str, int] | None = None, classes: Mapping[str, str] | None = None,
                     init_output: InitOutput = "zero", pad_lo: Mapping[str, list[int]] | None = None,
                     shapes: Mapping[str, list[int]] | None = None) -> Operator:
    """Parse the text form. ``bits``, ``classes``, ``pad_lo`` and ``shapes`` (stored tensor shapes, where
    they differ from the index space less its padding) are keyed by operand name.

    Default classes: the output is O, the first input I, every other input W.
    Default precision: 8-bit inputs, 32-bit output. Dimensions take the order of ``sizes`` when it
    names exactly the expression's dimensions (so a written operator reads back the same), else
    their order of first appearance in the expression.
    """
    p = _Parser(text)
    out_name, out_idx = p.access()
    tok = p.take()
    if tok not in ("+=", "="):
        raise SpecError(f"expression {text!r}: expected '+=' after the output, found {tok!r}")
    ins = [p.access()]
    while p.peek() == "*":
        p.take("*")
        ins.append(p.access())
    if p.peek() is not None:
        raise SpecError(f"expression {text!r}: unexpected {p.peek()!r} after the last factor")
    for key, table in (("precision", bits), ("classes", classes), ("padding", pad_lo), ("shapes", shapes)):
        if table is not None and not isinstance(table, Mapping):
            raise SpecError(f"{key} must map operand names to values, got {table!r}")
    bits = dict(bits or {})
    classes = dict(classes or {})
    pad_lo = dict(pad_lo or {})
    shapes = {n: _whole_numbers(v, f"shapes.{n}") for n, v in (shapes or {}).items()}
    names = [out_name] + [n for n, _ in ins]
    for key, table in (("precision", bits), ("classes", classes), ("padding", pad_lo), ("shapes", shapes)):
        unknown = set(table) - set(names)
        if unknown:
            raise SpecError(f"{key} names operands {sorted(unknown, key=str)} that are not in the expression "
                            f"(operands: {', '.join(names)})")
    order: list[str] = []
    for _, idx in [(out_name, out_idx)] + ins:
        for ix in idx:
            for d in ix.dims:
                if d not in order:
                    order.append(d)
    missing = [d for d in order if d not in sizes]
    if missing:
        raise SpecError(f"expression {text!r}: no size given for dimensions {missing}")
    extra = [d for d in sizes if d not in order]
    if extra:
        raise SpecError(f"sizes given for dimensions {extra} that the expression does not use")
    operands = [make_operand(out_name, out_idx, "output", bits.get(out_name, 32), classes.get(out_name, "O"),
                             shape=shapes.get(out_name, ()))]
    for k, (nm, idx) in enumerate(ins):
        operands.append(make_operand(nm, idx, "input", bits.get(nm, 8), classes.get(nm, "I" if k == 0 else "W"),
                                     pad_lo=pad_lo.get(nm, ()), shape=shapes.get(nm, ())))
    if sorted(sizes) == sorted(order):
        order = list(sizes)
    dims = tuple((d, sizes[d]) for d in order)
    return Operator(name, dims, tuple(operands), kind="einsum", init_output=init_output)


def _whole_numbers(value: object, where: str) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in value):
        raise SpecError(f"{where} must be a list of positive whole numbers, got {str(value)[:40]!r}")
    return list(value)


def operator_text(op: Operator) -> str:
    """The expression ``parse_expression`` reads back as ``op`` (with its sizes, precision, classes,
    padding and shapes given beside it): ``O[N,K,P,Q] += I[N,C,P+R,Q+S] * W[K,C,R,S]``."""
    return f"{op.output} += " + " * ".join(str(o) for o in op.inputs)
