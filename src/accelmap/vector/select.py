"""Select-parameter synthesis: from the element each lane and column must read (sigma) to the start, offsets,
step and square parameters of one intrinsic, or None when the shuffle network cannot express the selection.

Vyasa (Chatarasi et al.) step 4: "if the required data selection is incompatible with the shuffle network, our
approach generates a compilation error and prunes that candidate code variant". The rules are those emulated in
``intrinsics``; every synthesized parameter set is checked there by construction (tests re-run it).
"""

from __future__ import annotations

from functools import lru_cache
from itertools import product

import numpy as np

from accelmap.vector.intrinsics import LMAC8, MAC8, MAC16, MacShape

Sigma = tuple[tuple[int, ...], ...]     # [lane][col] -> element index within a register

# Square values, identity first: the common selections need no twiddle, and a stable order keeps output stable.
_SQUARES = [0x3210] + [s for s in (sum(v << (4 * k) for k, v in enumerate(t)) for t in product(range(4), repeat=4))
                       if s != 0x3210]


def _pack(nibbles: list[int]) -> int:
    return sum(v << (4 * i) for i, v in enumerate(nibbles))


def _pair_bases(sig: np.ndarray, square: int) -> list[tuple[int | None, int | None]] | None:
    """Per lane pair, the 16-bit base of the even and odd 32-bit words this square needs (None: unconstrained)."""
    sq = [(square >> (4 * k)) & 0xF for k in range(4)]
    out = []
    for p in range(sig.shape[0] // 2):
        want = (sig[2 * p, 0], sig[2 * p, 1], sig[2 * p + 1, 0], sig[2 * p + 1, 1])
        base: list[int | None] = [None, None]
        for k in range(4):
            word, half = divmod(sq[k], 2)
            b = int(want[k]) - half
            if base[word] is None:
                base[word] = b
            elif base[word] != b:
                return None
        out.append((base[0], base[1]))
    return out


def _pair_offsets(bases: list[tuple[int | None, int | None]], xstart: int) -> list[int] | None:
    offs: list[int] = []
    for be, bo in bases:
        if be is None:
            assert bo is not None
            rel = bo - xstart - 2
            if rel < 0 or rel % 2:
                return None
            oe = max(0, rel // 2 - 15)
            be = xstart + 2 * oe
        rel_e = be - xstart
        if rel_e < 0 or rel_e % 2 or rel_e > 30:
            return None
        oe = rel_e // 2
        if bo is None:
            oo = 0
        else:
            d = bo - be - 2
            if d < 0 or d % 2 or d > 30:
                return None
            oo = d // 2
        offs += [oe, oo]
    return offs


def _synth_pairs(sig: np.ndarray) -> tuple[int, list[int], int] | None:
    """(xstart, per-lane nibbles, square) for a lanes x 2 selection under the int16 pair rule."""
    for square in _SQUARES:
        bases = _pair_bases(sig, square)
        if bases is None:
            continue
        known = [b for pair in bases for b in pair if b is not None]
        # Largest start first: the offsets then stay the same from one column chunk to the next (Table IV).
        top = min(known) - min(known) % 2
        for xstart in range(top, max(-1, top - 34), -2):
            offs = _pair_offsets(bases, xstart)
            if offs is not None:
                return xstart, offs, square
    return None


@lru_cache(maxsize=None)
def synth_x(shape: MacShape, sigma: Sigma) -> tuple[int, ...] | None:
    """X parameters: mac16 (xstart, xoffsets, xoffsets_hi, xsquare); mac8 (xstart, xoffsets, xstep, xsquare);
    lmac8 (xstart, xoffsets)."""
    sig = np.array(sigma, dtype=np.int64)
    if sig.shape != (shape.lanes, shape.cols) or sig.min() < 0:
        return None
    if shape == LMAC8:
        xstart = int(sig.min())
        rel = sig[:, 0] - xstart
        return None if rel.max() > 15 else (xstart, _pack([int(v) for v in rel]))
    if shape == MAC8:
        step = sig[:, 2:] - sig[:, :2]
        xstep = int(step[0, 0])
        if np.any(step != xstep) or xstep % 2 or xstep < 0:
            return None
        got = _synth_pairs(sig[:, :2])
        return None if got is None else (got[0], _pack(got[1]), xstep, got[2])
    got = _synth_pairs(sig)
    if got is None:
        return None
    xstart, offs, square = got
    return xstart, _pack(offs[:8]), _pack(offs[8:]), square


@lru_cache(maxsize=None)
def synth_z(shape: MacShape, sigma: Sigma) -> tuple[int, ...] | None:
    """Z parameters (zstart, zoffsets, zoffsets_hi, zstep) within one Z buffer of ``shape.z_elems``."""
    sig = np.array(sigma, dtype=np.int64)
    if sig.shape != (shape.lanes, shape.cols) or sig.min() < 0 or sig.max() >= shape.z_elems:
        return None
    zstep = int(sig[0, 1] - sig[0, 0]) if shape.cols > 1 else 0
    if np.any(sig - sig[:, :1] != zstep * np.arange(shape.cols)):
        return None
    if shape.cols > 1 and zstep < 0:
        return None
    zstart = int(sig[:, 0].min())
    rel = [int(v) - zstart for v in sig[:, 0]]
    if max(rel) > 15:
        return None
    return zstart, _pack(rel[:8]), _pack(rel[8:]), zstep


def emulated_index(shape: MacShape, x_params: tuple[int, ...]) -> np.ndarray:
    """The X indices the intrinsic reads for parameters from ``synth_x`` (to check a synthesis)."""
    from accelmap.vector import intrinsics as it
    if shape == MAC16:
        return it.x_index_mac16(*x_params)
    if shape == MAC8:
        return it.x_index_mac8(*x_params)
    return it.x_index_lmac8(*x_params)
