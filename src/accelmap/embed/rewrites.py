"""The layout rewrites of Rieber's 2022 dissertation, Table 4.1, as NumPy transformations with their inverses.

Each rewrite acts on one array and returns a new one; ``inverse`` undoes it
given the shape it started from. Order of application (Table 4.1): 1 stencil
unroll / dilate pack / image pack, 2 pad, 3 split, 4 reorder, 5 fuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Rewrite:
    rule: str                 # Table 4.1 name
    detail: str               # what it does to which axis
    params: tuple             # arguments of apply/inverse
    shape_in: tuple[int, ...]
    shape_out: tuple[int, ...]

    def apply(self, arr: np.ndarray) -> np.ndarray:
        return _APPLY[self.kind](arr, *self.params)

    def inverse(self, arr: np.ndarray) -> np.ndarray:
        return _INVERSE[self.kind](arr, self.shape_in, *self.params)

    @property
    def kind(self) -> str:
        return {"stencil unroll (im2col)": "unroll", "dilate pack": "pack_or_unroll",
                "image pack": "pack_or_unroll"}.get(self.rule, self.rule)

    def __str__(self) -> str:
        return f"{self.rule:<24} {self.detail}  {self.shape_in} -> {self.shape_out}"


# ---- rule 1: stencil unroll (gather one axis into one axis per affine term) --------

def unroll(arr: np.ndarray, axis: int, coeffs: tuple[int, ...], sizes: tuple[int, ...]) -> np.ndarray:
    """``[.., sum_k c_k*i_k, ..] => [.., i_0, i_1, .., ..]``; indices past the axis read zero."""
    grids = np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij")
    idx = sum(c * g for c, g in zip(coeffs, grids, strict=True))
    ext = arr.shape[axis]
    valid = idx < ext
    taken = np.take(arr, np.where(valid, idx, 0), axis=axis)
    mask_shape = [1] * axis + list(valid.shape) + [1] * (arr.ndim - axis - 1)
    return np.where(valid.reshape(mask_shape), taken, 0).astype(arr.dtype)


def un_unroll(arr: np.ndarray, shape_in: tuple, axis: int, coeffs: tuple[int, ...], sizes: tuple[int, ...]) -> np.ndarray:
    """Scatter back: every original element some term combination reaches gets its value."""
    out = np.zeros(shape_in, dtype=arr.dtype)
    grids = np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij")
    idx = np.asarray(sum(c * g for c, g in zip(coeffs, grids, strict=True))).reshape(-1)
    k = len(sizes)
    flat = arr.reshape(arr.shape[:axis] + (-1,) + arr.shape[axis + k:])
    valid = idx < shape_in[axis]
    moved = np.moveaxis(out, axis, 0)
    moved[idx[valid]] = np.moveaxis(flat, axis, 0)[valid]
    return out


# ---- rule 1 (pack): split an axis into (index // f, phase) ---------------------------

def pack(arr: np.ndarray, axis: int, factor: int) -> np.ndarray:
    """``[.., I, ..] => [.., I/f, f, ..]`` (zero-extended), the phase axis right after."""
    ext = arr.shape[axis]
    full = -(-ext // factor) * factor
    arr = pad(arr, axis, 0, full - ext)
    return arr.reshape(arr.shape[:axis] + (full // factor, factor) + arr.shape[axis + 1:])


def unpack(arr: np.ndarray, shape_in: tuple, axis: int, factor: int) -> np.ndarray:
    merged = arr.reshape(arr.shape[:axis] + (-1,) + arr.shape[axis + 2:])
    return np.take(merged, np.arange(shape_in[axis]), axis=axis)


def pack_or_unroll(arr, *params):
    return pack(arr, *params) if len(params) == 2 else unroll(arr, *params)


def unpack_or_unroll(arr, shape_in, *params):
    return unpack(arr, shape_in, *params) if len(params) == 2 else un_unroll(arr, shape_in, *params)


# ---- rule 2: pad --------------------------------------------------------------------

def pad(arr: np.ndarray, axis: int, lo: int, hi: int) -> np.ndarray:
    """Zero padding (negative ``hi`` crops: an index space shorter than the stored tensor)."""
    if hi < 0:
        arr = np.take(arr, np.arange(arr.shape[axis] + hi), axis=axis)
        hi = 0
    widths = [(0, 0)] * arr.ndim
    widths[axis] = (lo, hi)
    return np.pad(arr, widths)


def unpad(arr: np.ndarray, shape_in: tuple, axis: int, lo: int, hi: int) -> np.ndarray:
    n = min(shape_in[axis], arr.shape[axis] - lo)
    out = np.take(arr, np.arange(lo, lo + n), axis=axis)
    if n < shape_in[axis]:
        out = pad(out, axis, 0, shape_in[axis] - n)
    return out


# ---- rules 3-5: split, reorder, fuse ------------------------------------------------

def split(arr: np.ndarray, axis: int, inner: int) -> np.ndarray:
    return arr.reshape(arr.shape[:axis] + (arr.shape[axis] // inner, inner) + arr.shape[axis + 1:])


def unsplit(arr: np.ndarray, shape_in: tuple, axis: int, inner: int) -> np.ndarray:
    return arr.reshape(shape_in)


def reorder(arr: np.ndarray, perm: tuple[int, ...]) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(arr, perm))


def unreorder(arr: np.ndarray, shape_in: tuple, perm: tuple[int, ...]) -> np.ndarray:
    return np.transpose(arr, np.argsort(perm))


def fuse(arr: np.ndarray, axis: int, count: int) -> np.ndarray:
    return arr.reshape(arr.shape[:axis] + (-1,) + arr.shape[axis + count:])


def unfuse(arr: np.ndarray, shape_in: tuple, axis: int, count: int) -> np.ndarray:
    return arr.reshape(shape_in)


_APPLY: dict[str, Callable[..., np.ndarray]] = {
    "unroll": unroll, "pack_or_unroll": pack_or_unroll, "pad": pad, "split": split, "reorder": reorder, "fuse": fuse}
_INVERSE: dict[str, Callable[..., np.ndarray]] = {
    "unroll": un_unroll, "pack_or_unroll": unpack_or_unroll, "pad": unpad, "split": unsplit, "reorder": unreorder,
    "fuse": unfuse}
