"""Area and energy per access of a design's parts, from the component library's figures.

The figures are a table (``data/components/components_45nm.csv``) computed at 45 nm by the
component library AccelForge uses: CACTI 7 for SRAM (hwcomponents-cacti), Aladdin's multiplier,
adder, register and wire models (hwcomponents-library, after Shao et al., ISCA 2014) and
LPDDR4 at 8 pJ/bit. The library itself needs Python >= 3.12, so ``benchmarks/component_table.py``
runs it in its own environment and writes the table; here we only read it.

SRAM energy and area are interpolated in log-log space between the table's capacities and word
widths (both grow smoothly and sub-linearly with capacity in CACTI), and extrapolated along the
nearest segment outside it, which the design notes say.
"""

from __future__ import annotations

import bisect
import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

TABLE = "components_45nm.csv"
TECHNOLOGY = "45nm"


@dataclass(frozen=True)
class Part:
    """One row: energies in pJ per access of ``width_bits``, area in um^2."""

    kind: str
    width_bits: int
    size_bits: int
    read_pj: float
    write_pj: float
    area_um2: float


@lru_cache(maxsize=1)
def component_table() -> tuple[Part, ...]:
    text = (resources.files("accelmap") / "data" / "components" / TABLE).read_text()
    rows = list(csv.DictReader(text.splitlines()))
    return tuple(Part(r["kind"], int(r["width_bits"]), int(r["size_bits"]), float(r["read_pj"]),
                      float(r["write_pj"]), float(r["area_um2"])) for r in rows)


def _part(kind: str, width: int | None = None) -> Part:
    for p in component_table():
        if p.kind == kind and (width is None or p.width_bits == width):
            return p
    raise KeyError((kind, width))


def _loglog(xs: list[float], ys: list[float], x: float) -> float:
    """Piecewise-linear interpolation of log y over log x; the end segments extend outside."""
    lx = [math.log(v) for v in xs]
    ly = [math.log(max(v, 1e-30)) for v in ys]
    t = math.log(x)
    k = min(max(bisect.bisect_left(lx, t), 1), len(lx) - 1)
    x0, x1, y0, y1 = lx[k - 1], lx[k], ly[k - 1], ly[k]
    return math.exp(y0 + (y1 - y0) * (t - x0) / (x1 - x0))


@lru_cache(maxsize=None)
def _sram_series(width: int) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    rows = sorted((p for p in component_table() if p.kind == "sram" and p.width_bits == width),
                  key=lambda p: p.size_bits)
    return (tuple(float(p.size_bits) for p in rows), tuple(p.read_pj for p in rows),
            tuple(p.write_pj for p in rows), tuple(p.area_um2 for p in rows))


def _sram_widths() -> list[int]:
    return sorted({p.width_bits for p in component_table() if p.kind == "sram"})


@lru_cache(maxsize=4096)
def sram(size_bits: int, width_bits: int) -> tuple[float, float, float]:
    """(read pJ, write pJ, area um^2) of one SRAM of ``size_bits`` accessed ``width_bits`` at a time."""
    if size_bits < 1 or width_bits < 1:
        raise ValueError(f"an SRAM needs a positive size and width, got {size_bits} bits x {width_bits}")

    def at(w: int) -> tuple[float, float, float]:
        sizes, rd, wr, ar = _sram_series(w)
        return (_loglog(list(sizes), list(rd), size_bits), _loglog(list(sizes), list(wr), size_bits),
                _loglog(list(sizes), list(ar), size_bits))

    widths = _sram_widths()
    if width_bits in widths:
        return at(width_bits)
    k = min(max(bisect.bisect_left(widths, width_bits), 1), len(widths) - 1)
    lo, hi = at(widths[k - 1]), at(widths[k])
    rd, wr, ar = (_loglog([widths[k - 1], widths[k]], [a, b], width_bits) for a, b in zip(lo, hi, strict=True))
    return rd, wr, ar


def sram_in_table(size_bits: int, width_bits: int) -> bool:
    """Is this SRAM inside the table's range (no extrapolation)?"""
    widths = _sram_widths()
    sizes = _sram_series(widths[0])[0]
    return widths[0] <= width_bits <= widths[-1] and sizes[0] <= size_bits <= sizes[-1]


def mac(operand_bits: int, accumulator_bits: int) -> tuple[float, float]:
    """(pJ, um^2) of one multiply-accumulate: a multiplier of the operand width, an adder of the
    accumulator width (Aladdin: multiplier energy and area grow with the square of the width,
    the adder's linearly)."""
    widths = sorted(p.width_bits for p in component_table() if p.kind == "multiplier")
    m = [(_part("multiplier", w).read_pj, _part("multiplier", w).area_um2) for w in widths]
    e_mul = _loglog(list(map(float, widths)), [x[0] for x in m], operand_bits)
    a_mul = _loglog(list(map(float, widths)), [x[1] for x in m], operand_bits)
    add = _part("adder", 32)
    return e_mul + add.read_pj * accumulator_bits / 32, a_mul + add.area_um2 * accumulator_bits / 32


def register_bit() -> tuple[float, float]:
    """(pJ per bit read or written, um^2 per bit) of a flip-flop register (Aladdin)."""
    r = _part("register")
    return r.read_pj, r.area_um2


def wire_pj_per_bit_mm() -> float:
    """Energy of moving one bit one millimetre on chip (0.2 pF/mm at 0.7 V)."""
    return _part("wire_mm").read_pj


def dram_pj_per_bit() -> float:
    """LPDDR4: 8 pJ per bit read or written."""
    d = _part("dram_lpddr4")
    return d.read_pj / d.width_bits
