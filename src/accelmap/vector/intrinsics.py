"""Bit-exact NumPy emulation of the AI-Engine-like vector MAC intrinsics that the vectorizer emits.

The semantics follow the public description of the first-generation AI Engine intrinsics (Xilinx UG1079,
"MAC on 16x16 bits" / "MAC on 32x32 bits"; Chatarasi et al., "Vyasa", describe the datapath):

* ``mac16`` / ``mul16``: int16 x int16, 16 lanes x 2 columns, 48-bit accumulators. The X buffer is selected at
  32-bit granularity: offsets come in lane pairs, the even lane's nibble is an absolute 32-bit offset picking
  16-bit elements (2o, 2o+1) and the odd lane's nibble is relative to it plus one; ``xsquare`` then permutes the
  four 16-bit values of each lane pair (even col 0, even col 1, odd col 0, odd col 1). The Z buffer (16 elements)
  is selected at 16-bit granularity: lane i, column j reads ``zstart + zoffset_i + j * zstep``.
* ``mac8`` / ``mul8``: int16 x int16, 8 lanes x 4 columns; columns 2 and 3 repeat the X selection of columns 0
  and 1 shifted by ``xstep`` (the step applies to the next 2x2 block, so it must stay 32-bit aligned).
* ``lmac8`` / ``lmul8``: int32 x int32, 8 lanes x 1 column, 80-bit accumulators; full 32-bit permutation.

Choices where the public text is silent (they are ours, used identically by the C++ header the emitted code is
compiled against): start values are in elements and, for int16 X, must be even; indices wrap modulo the buffer
length; ``srs`` shifts right arithmetically (truncation, the default rounding mode) and saturates.
Registers are batched: every array has a leading axis of independent instances (loop iterations), which lets
the emulator run all iterations of a loop body at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from accelmap.errors import AccelmapError

REGISTER_BITS = 128          # one physical vector register; loads and stores are aligned to it
MAX_REGISTER_BITS = 1024     # the widest grouped register (Vyasa: "1024b ... which is the maximum")
LEGAL_REGISTER_BITS = (128, 256, 512, 1024)


class IntrinsicError(AccelmapError):
    """Select parameters or a memory access the intrinsic cannot express."""


@dataclass(frozen=True)
class MacShape:
    """One vector MAC family: lanes x columns, operand and accumulator widths, buffer sizes it accepts."""

    name: str
    lanes: int
    cols: int
    data_bits: int
    acc_bits: int
    x_elems: tuple[int, ...]     # allowed X buffer lengths (elements)
    z_elems: int                 # Z buffer length (elements)

    @property
    def macs(self) -> int:
        return self.lanes * self.cols


MAC16 = MacShape("mac16", 16, 2, 16, 48, (32, 64), 16)
MAC8 = MacShape("mac8", 8, 4, 16, 48, (32, 64), 16)
LMAC8 = MacShape("lmac8", 8, 1, 32, 80, (16, 32), 8)
SHAPES = {s.name: s for s in (MAC16, MAC8, LMAC8)}


def nibble(word: int, i: int) -> int:
    return (word >> (4 * i)) & 0xF


def _check_word(name: str, value: int, nibbles: int) -> None:
    if not 0 <= value < 1 << (4 * nibbles):
        raise IntrinsicError(f"{name}={value:#x} must fit {nibbles} nibbles")


def _pair_select(xstart: int, offsets: list[int], square: int, step: int, col_blocks: int) -> np.ndarray:
    """X indices (lanes x 2*col_blocks) of the int16 pair rule: 32-bit offsets per lane pair, then the square."""
    if xstart % 2:
        raise IntrinsicError(f"xstart={xstart} must be even: int16 X data is selected at 32-bit granularity")
    if step % 2:
        raise IntrinsicError(f"xstep={step} must be even: the step must keep 32-bit alignment")
    _check_word("xsquare", square, 4)
    sq = [nibble(square, k) for k in range(4)]
    if any(v > 3 for v in sq):
        raise IntrinsicError(f"xsquare={square:#06x}: each nibble selects one of 4 values (0..3)")
    lanes = len(offsets)
    idx = np.empty((lanes, 2 * col_blocks), dtype=np.int64)
    for p in range(lanes // 2):
        o_even, o_odd = offsets[2 * p], offsets[2 * p + 1]
        for q in range(col_blocks):
            be = xstart + 2 * o_even + q * step
            bo = xstart + 2 * (o_even + o_odd + 1) + q * step
            vals = (be, be + 1, bo, bo + 1)
            idx[2 * p, 2 * q:2 * q + 2] = (vals[sq[0]], vals[sq[1]])
            idx[2 * p + 1, 2 * q:2 * q + 2] = (vals[sq[2]], vals[sq[3]])
    return idx


def _frozen(a: np.ndarray) -> np.ndarray:
    """Cached index tables are shared: make them read-only."""
    a.flags.writeable = False
    return a


@lru_cache(maxsize=65536)
def x_index_mac16(xstart: int, xoffsets: int, xoffsets_hi: int, xsquare: int) -> np.ndarray:
    _check_word("xoffsets", xoffsets, 8)
    _check_word("xoffsets_hi", xoffsets_hi, 8)
    offs = [nibble(xoffsets, i) for i in range(8)] + [nibble(xoffsets_hi, i) for i in range(8)]
    return _frozen(_pair_select(xstart, offs, xsquare, 0, 1))


@lru_cache(maxsize=65536)
def x_index_mac8(xstart: int, xoffsets: int, xstep: int, xsquare: int) -> np.ndarray:
    _check_word("xoffsets", xoffsets, 8)
    return _frozen(_pair_select(xstart, [nibble(xoffsets, i) for i in range(8)], xsquare, xstep, 2))


@lru_cache(maxsize=65536)
def x_index_lmac8(xstart: int, xoffsets: int) -> np.ndarray:
    _check_word("xoffsets", xoffsets, 8)
    return _frozen(np.array([[xstart + nibble(xoffsets, i)] for i in range(8)], dtype=np.int64))


@lru_cache(maxsize=65536)
def z_index(lanes: int, cols: int, zstart: int, zoffsets: int, zoffsets_hi: int, zstep: int) -> np.ndarray:
    """Z indices (lanes x cols): lane i, column j reads zstart + offset_i + j * zstep (16/32-bit granularity)."""
    _check_word("zoffsets", zoffsets, 8)
    _check_word("zoffsets_hi", zoffsets_hi, 8)
    offs = [nibble(zoffsets, i) for i in range(8)] + [nibble(zoffsets_hi, i) for i in range(8)]
    return _frozen(np.array([[zstart + offs[i] + j * zstep for j in range(cols)] for i in range(lanes)],
                            dtype=np.int64))


def wrap_signed(v: np.ndarray, bits: int) -> np.ndarray:
    """Two's-complement wrap of int64 values to ``bits`` (< 64) bits."""
    half = np.int64(1) << (bits - 1)
    return ((v + half) & ((np.int64(1) << bits) - 1)) - half


def _mac(shape: MacShape, acc: np.ndarray | None, x: np.ndarray, xi: np.ndarray, z: np.ndarray,
         zi: np.ndarray) -> np.ndarray:
    if x.shape[-1] not in shape.x_elems:
        raise IntrinsicError(f"{shape.name}: X buffer of {x.shape[-1]} elements; allowed {shape.x_elems}")
    if z.shape[-1] != shape.z_elems:
        raise IntrinsicError(f"{shape.name}: Z buffer of {z.shape[-1]} elements; needs {shape.z_elems}")
    xv = x.astype(np.int64)[..., xi % x.shape[-1]]
    zv = z.astype(np.int64)[..., zi % shape.z_elems]
    prod = xv * zv
    if shape.acc_bits >= 64:
        # 80-bit accumulators are held in int64: refuse (never wrap silently) values that int64 cannot hold.
        bound = float(np.abs(prod).max(initial=0)) * shape.cols
        bound += 0.0 if acc is None else float(np.abs(acc).max(initial=0))
        if bound >= 2.0 ** 62:
            raise IntrinsicError(f"{shape.name}: accumulator magnitude {bound:.3g} exceeds the int64 emulation range")
        s = prod.sum(axis=-1)
        return s if acc is None else acc + s
    s = prod.sum(axis=-1)
    return wrap_signed(s if acc is None else acc + s, shape.acc_bits)


def mac16(acc: np.ndarray | None, xbuff: np.ndarray, xstart: int, xoffsets: int, xoffsets_hi: int, xsquare: int,
          zbuff: np.ndarray, zstart: int, zoffsets: int, zoffsets_hi: int, zstep: int) -> np.ndarray:
    """``acc`` None is ``mul16``."""
    return _mac(MAC16, acc, xbuff, x_index_mac16(xstart, xoffsets, xoffsets_hi, xsquare),
                zbuff, z_index(16, 2, zstart, zoffsets, zoffsets_hi, zstep))


def mac8(acc: np.ndarray | None, xbuff: np.ndarray, xstart: int, xoffsets: int, xstep: int, xsquare: int,
         zbuff: np.ndarray, zstart: int, zoffsets: int, zstep: int) -> np.ndarray:
    return _mac(MAC8, acc, xbuff, x_index_mac8(xstart, xoffsets, xstep, xsquare),
                zbuff, z_index(8, 4, zstart, zoffsets, 0, zstep))


def lmac8(acc: np.ndarray | None, xbuff: np.ndarray, xstart: int, xoffsets: int,
          zbuff: np.ndarray, zstart: int, zoffsets: int) -> np.ndarray:
    return _mac(LMAC8, acc, xbuff, x_index_lmac8(xstart, xoffsets), zbuff, z_index(8, 1, zstart, zoffsets, 0, 0))


def srs(acc: np.ndarray, shift: int, out_bits: int) -> np.ndarray:
    """Shift right (arithmetic, truncating) and saturate to ``out_bits``-bit signed."""
    lo, hi = -(1 << (out_bits - 1)), (1 << (out_bits - 1)) - 1
    return np.clip(acc >> shift, lo, hi).astype(np.int16 if out_bits == 16 else np.int32)


def register_bits_for(n_bits: int) -> int:
    """Smallest legal grouped register holding ``n_bits`` (0 when wider than the widest register)."""
    return next((b for b in LEGAL_REGISTER_BITS if b >= n_bits), 0)


def aligned_load(mem: np.ndarray, addr: np.ndarray, n: int) -> np.ndarray:
    """Load ``n`` elements at element addresses ``addr`` (one per instance); 128-bit alignment is required."""
    bits = mem.dtype.itemsize * 8
    if n * bits not in LEGAL_REGISTER_BITS:
        raise IntrinsicError(f"a load of {n} x {bits}-bit elements is not a legal register width {LEGAL_REGISTER_BITS}")
    per = REGISTER_BITS // bits
    bad = addr % per != 0
    if np.any(bad):
        raise IntrinsicError(f"unaligned load at element {int(addr[bad][0])}: must be a multiple of {per}")
    if addr.min(initial=0) < 0 or addr.max(initial=0) + n > mem.shape[0]:
        raise IntrinsicError("load outside the buffer")
    return mem[addr[:, None] + np.arange(n)]


def aligned_store(mem: np.ndarray, addr: np.ndarray, values: np.ndarray) -> None:
    bits = mem.dtype.itemsize * 8
    per = REGISTER_BITS // bits
    if np.any(addr % per):
        raise IntrinsicError(f"unaligned store: addresses must be multiples of {per} elements")
    n = values.shape[-1]
    if addr.min(initial=0) < 0 or addr.max(initial=0) + n > mem.shape[0]:
        raise IntrinsicError("store outside the buffer")
    mem[addr[:, None] + np.arange(n)] = values
