"""Quantities with units in accelerator files: sizes, energies, bandwidths.

Memory sizes are binary: 1 KB = 1 kB = 1 KiB = 1024 bytes (the convention of
the papers our presets cite). Every value needs a unit, so that a forgotten
or wrong unit is an error rather than a factor-of-eight surprise.
"""

from __future__ import annotations

import re

_NUM = r"(-?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"

SIZE_UNITS = {"bit": 1, "bits": 1, "b": 1, "B": 8, "byte": 8, "bytes": 8,
              "KiB": 8 * 1024, "KB": 8 * 1024, "kB": 8 * 1024, "kiB": 8 * 1024,
              "MiB": 8 * 1024 ** 2, "MB": 8 * 1024 ** 2, "GiB": 8 * 1024 ** 3, "GB": 8 * 1024 ** 3,
              "Kbit": 1024, "Mbit": 1024 ** 2}
WORD_UNITS = ("word", "words")
ENERGY_UNITS = {"fJ": 1e-3, "pJ": 1.0, "nJ": 1e3, "uJ": 1e6}
TIME_UNITS = ("cycle", "cycles")


class UnitError(ValueError):
    """Message already says what was given and what is allowed."""


def _split(value, what: str, allowed: str) -> tuple[float, str]:
    if isinstance(value, bool) or value is None:
        raise UnitError(f"{value!r} is not {what}; write a number with a unit: {allowed}")
    if isinstance(value, (int, float)):
        raise UnitError(f"{value!r} has no unit; write it as '{value} <unit>' with one of: {allowed}")
    m = re.fullmatch(rf"\s*{_NUM}\s*([A-Za-z/]+)\s*", str(value))
    if not m:
        raise UnitError(f"{value!r} is not {what}; write a number with a unit: {allowed}")
    return float(m.group(1)), m.group(2)


def _whole(x: float, value) -> int:
    if x != int(x):
        raise UnitError(f"{value!r} is not a whole number of bits")
    return int(x)


def parse_size_bits(value, word_bits: int | None) -> int | None:
    """'108 KB' -> bits; '12 words' uses the level's word width; 'unbounded' -> None."""
    allowed = "bit, B, KB/KiB, MB/MiB, GB, words, or 'unbounded'"
    if isinstance(value, str) and value.strip() == "unbounded":
        return None
    x, unit = _split(value, "a size", allowed)
    if x < 0:
        raise UnitError(f"{value!r} is negative; a size must be >= 0")
    if unit in WORD_UNITS:
        if word_bits is None:
            raise UnitError(f"{value!r} is in words but the level has no 'width'")
        return _whole(x * word_bits, value)
    if unit not in SIZE_UNITS:
        raise UnitError(f"{value!r}: unknown unit {unit!r}; allowed: {allowed}")
    return _whole(x * SIZE_UNITS[unit], value)


def parse_width_bits(value, what: str = "a word width") -> int:
    allowed = "bit or B"
    x, unit = _split(value, what, allowed)
    if unit not in ("bit", "bits", "b", "B", "byte", "bytes"):
        raise UnitError(f"{value!r}: unknown unit {unit!r} for {what}; allowed: {allowed}")
    bits = _whole(x * SIZE_UNITS[unit], value)
    if bits < 1:
        raise UnitError(f"{value!r}: {what} must be at least 1 bit")
    return bits


def parse_energy_pj(value, word_bits: int | None = None) -> float:
    """Energy of one access of a word ('6 pJ'), or per bit ('0.4 pJ/bit')."""
    allowed = "fJ, pJ, nJ (per access), or pJ/bit"
    x, unit = _split(value, "an energy", allowed)
    if x < 0:
        raise UnitError(f"{value!r} is negative; an energy must be >= 0")
    if unit.endswith("/bit"):
        base = unit[:-4]
        if base not in ENERGY_UNITS:
            raise UnitError(f"{value!r}: unknown unit {unit!r}; allowed: {allowed}")
        if word_bits is None:
            raise UnitError(f"{value!r} is per bit but there is no word width to scale it by")
        return x * ENERGY_UNITS[base] * word_bits
    if unit not in ENERGY_UNITS:
        raise UnitError(f"{value!r}: unknown unit {unit!r}; allowed: {allowed}")
    return x * ENERGY_UNITS[unit]


def parse_bandwidth_bits(value, word_bits: int | None) -> float | None:
    """'9 words/cycle', '64 B/cycle', '512 bit/cycle' -> bits per cycle; 'unbounded' -> None."""
    allowed = "words/cycle, bit/cycle, B/cycle, or 'unbounded'"
    if isinstance(value, str) and value.strip() == "unbounded":
        return None
    x, unit = _split(value, "a bandwidth", allowed)
    if "/" not in unit or unit.split("/", 1)[1] not in TIME_UNITS:
        raise UnitError(f"{value!r}: a bandwidth is per cycle; allowed: {allowed}")
    if x <= 0:
        raise UnitError(f"{value!r}: a bandwidth must be > 0")
    base = unit.split("/", 1)[0]
    if base in WORD_UNITS:
        if word_bits is None:
            raise UnitError(f"{value!r} is in words but the level has no 'width'")
        return x * word_bits
    if base not in SIZE_UNITS:
        raise UnitError(f"{value!r}: unknown unit {base!r}; allowed: {allowed}")
    return x * SIZE_UNITS[base]


def format_bits(bits: int | None) -> str:
    if bits is None:
        return "unbounded"
    if bits % 8:
        return f"{bits} bit"
    b = bits // 8
    for unit, n in (("MiB", 1024 ** 2), ("KiB", 1024)):
        if b >= n and b % (n // 1024 if n > 1024 else 1) == 0 and b / n == int(b / n):
            return f"{b // n} {unit}"
    if b >= 1024:
        return f"{b / 1024:.1f} KiB"
    return f"{b} B"
