"""Convolutions as the vectorizer sees them: loop dimensions, tensors with affine axes, data layouts in memory,
packing into layouts and the NumPy reference.

Notation follows Vyasa (Chatarasi et al.): output O(x, y, k), filter W(r, s, c, k) with r along the width and s
along the height, input I(x*stride + r*dilation, y*stride + s*dilation, c). CONV3D adds z (output depth) and t
(filter depth). A depthwise convolution reads input channel k (no c).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

import numpy as np

from accelmap.errors import SpecError

OUTPUT_DIMS = ("x", "y", "z", "k")
REDUCTION_DIMS = ("c", "r", "s", "t")


@dataclass(frozen=True)
class Axis:
    """One tensor axis: its name and index sum(coeff * loop dim)."""

    name: str
    terms: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class ConvSpec:
    name: str
    x: int
    y: int
    k: int
    c: int
    r: int
    s: int
    z: int = 1
    t: int = 1
    stride: int = 1
    dilation: int = 1
    depthwise: bool = False
    bits: int = 16          # operand precision: 16 (int16) or 32 (int32)
    # Zero padding (lo, hi) of the input per spatial axis, in the order X, Y (, Z); () is none. The kernel reads a
    # zero halo laid out around the stored image in its input buffer (the producer writes the image inside it).
    pad: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        for f in ("x", "y", "k", "c", "r", "s", "z", "t", "stride", "dilation"):
            if getattr(self, f) < 1:
                raise SpecError(f"{self.name}: {f}={getattr(self, f)} must be >= 1")
        if self.bits not in (16, 32):
            raise SpecError(f"{self.name}: precision int{self.bits} is not supported; allowed: int16, int32")
        if self.depthwise and self.c != 1:
            raise SpecError(f"{self.name}: a depthwise convolution has c=1 per filter, got c={self.c}")
        if self.pad:
            axes = 3 if self.is_3d else 2
            if len(self.pad) != axes or any(lo < 0 or hi < 0 for lo, hi in self.pad):
                names = "X, Y, Z" if axes == 3 else "X, Y"
                raise SpecError(f"{self.name}: padding {self.pad} needs {axes} (lo, hi) pairs >= 0 ({names})")
            ext = self.extents("I")
            for (lo, hi), ax in zip(self.pad, "XYZ", strict=False):
                if lo + hi >= ext[ax]:
                    raise SpecError(f"{self.name}: padding {lo}+{hi} leaves no stored input along {ax} "
                                    f"(the convolution reads {ext[ax]} positions)")

    @property
    def sizes(self) -> dict[str, int]:
        return {"x": self.x, "y": self.y, "z": self.z, "k": self.k, "c": self.c, "r": self.r, "s": self.s,
                "t": self.t}

    @property
    def macs(self) -> int:
        return self.x * self.y * self.z * self.k * self.c * self.r * self.s * self.t

    @property
    def is_3d(self) -> bool:
        return self.z > 1 or self.t > 1

    def input_extent(self, out: int, filt: int) -> int:
        return (out - 1) * self.stride + (filt - 1) * self.dilation + 1

    @cached_property
    def axes(self) -> dict[str, tuple[Axis, ...]]:
        """Tensor -> axes in natural (reference array) order."""
        st, dl = self.stride, self.dilation
        ch = Axis("C", (("k", 1),)) if self.depthwise else Axis("C", (("c", 1),))
        i_axes = [Axis("X", (("x", st), ("r", dl))), Axis("Y", (("y", st), ("s", dl)))]
        w_axes = [Axis("R", (("r", 1),)), Axis("S", (("s", 1),))]
        o_axes = [Axis("X", (("x", 1),)), Axis("Y", (("y", 1),))]
        if self.is_3d:
            i_axes.append(Axis("Z", (("z", st), ("t", dl))))
            w_axes.append(Axis("T", (("t", 1),)))
            o_axes.append(Axis("Z", (("z", 1),)))
        if not self.depthwise:
            w_axes.append(Axis("C", (("c", 1),)))
        return {"I": (*i_axes, ch), "W": (*w_axes, Axis("K", (("k", 1),))), "O": (*o_axes, Axis("K", (("k", 1),)))}

    def stored_input_shape(self) -> tuple[int, ...]:
        """The input without its zero halo, natural order."""
        ext = self.extents("I")
        pads = dict(zip("XYZ", self.pad, strict=False))
        return tuple(n - sum(pads.get(a, (0, 0))) for a, n in ext.items())

    def pad_input(self, inp: np.ndarray) -> np.ndarray:
        """The stored input with its zero halo: the array the kernel's input buffer holds."""
        if not self.pad:
            return inp
        widths = [*self.pad, *[(0, 0)] * (inp.ndim - len(self.pad))]
        return np.pad(inp, widths)

    def extents(self, tensor: str) -> dict[str, int]:
        sz = self.sizes
        return {a.name: sum(c * (sz[d] - 1) for d, c in a.terms) + 1 for a in self.axes[tensor]}

    def __str__(self) -> str:
        kind = "depthwise " if self.depthwise else ""
        d3 = f"x{self.z}" if self.is_3d else ""
        f3 = f"x{self.t}" if self.is_3d else ""
        extra = f", stride {self.stride}" if self.stride > 1 else ""
        extra += f", dilation {self.dilation}" if self.dilation > 1 else ""
        extra += f", padding {'/'.join(f'{lo},{hi}' for lo, hi in self.pad)} (X/Y lo,hi)" if any(
            lo or hi for lo, hi in self.pad) else ""
        return (f"{self.name}: {kind}CONV{'3' if self.is_3d else '2'}D output {self.x}x{self.y}{d3}x{self.k}, "
                f"filter {self.r}x{self.s}{f3}x{self.c}x{self.k}, int{self.bits}{extra}, {self.macs:,} MACs")


@dataclass(frozen=True)
class LayoutItem:
    axis: str
    block: int = 0          # 0: the whole axis; >0 with inner False: axis // block; with inner True: axis % block
    inner: bool = False

    def __str__(self) -> str:
        if not self.block:
            return self.axis
        return f"({self.block})" if self.inner else f"({self.axis}/{self.block})"


@dataclass(frozen=True)
class Layout:
    """Order of a tensor's (possibly blocked) axes in memory, outermost first, e.g. ``(C/2) Y X (2)``."""

    items: tuple[LayoutItem, ...]

    def __str__(self) -> str:
        return "".join(str(i) for i in self.items)

    @staticmethod
    def parse(text: str) -> Layout:
        """Space-separated items: ``K``, ``C/2`` (outer part), ``C%2`` (inner part)."""
        items = []
        for tok in text.split():
            if "/" in tok:
                a, b = tok.split("/")
                items.append(LayoutItem(a, int(b), False))
            elif "%" in tok:
                a, b = tok.split("%")
                items.append(LayoutItem(a, int(b), True))
            else:
                items.append(LayoutItem(tok))
        return Layout(tuple(items))


@dataclass(frozen=True)
class PlacedTensor:
    """A tensor laid out in memory: strides per layout item (rows padded to 128-bit alignment), size."""

    name: str
    layout: Layout
    extents: tuple[tuple[str, int], ...]
    strides: tuple[int, ...]
    size: int               # elements, including the slack a covering load may read past the end

    def address(self, coords: Mapping[str, Any]) -> Any:
        """Element address of axis coordinates (arrays broadcast)."""
        addr: Any = 0
        for item, st in zip(self.layout.items, self.strides, strict=True):
            v = coords[item.axis]
            if item.block:
                v = v % item.block if item.inner else v // item.block
            addr = addr + st * v
        return addr


def place(name: str, layout: Layout, extents: dict[str, int], align: int, slack: int) -> PlacedTensor:
    """Strides of a layout: each item's stride is the product of the inner extents; after every item that is not
    an inner block the running size is rounded up to ``align`` elements, so rows start 128-bit aligned (the
    paper's input pitch 264 for 256 outputs is such a padding)."""
    axes = {i.axis for i in layout.items}
    if axes != set(extents):
        raise SpecError(f"layout {layout} of {name} must order exactly the axes {sorted(extents)}")
    for item in layout.items:
        if item.block and not any(o.axis == item.axis and o.block == item.block and o.inner != item.inner
                                  for o in layout.items):
            raise SpecError(f"layout {layout} of {name}: block {item} needs its other part")
    strides = [0] * len(layout.items)
    run = 1
    for pos in range(len(layout.items) - 1, -1, -1):
        item = layout.items[pos]
        strides[pos] = run
        e = extents[item.axis]
        n = item.block if item.inner else (math.ceil(e / item.block) if item.block else e)
        run *= n
        if not item.inner:
            run = -(-run // align) * align
    return PlacedTensor(name, layout, tuple(extents.items()), tuple(strides), run + slack)


def pack(tensor: PlacedTensor, values: np.ndarray, axes: tuple[Axis, ...], dtype) -> np.ndarray:
    """A natural-order array laid out into a zero-filled flat buffer."""
    buf = np.zeros(tensor.size, dtype=dtype)
    idx = np.indices(values.shape)
    addr = tensor.address({a.name: idx[i] for i, a in enumerate(axes)})
    buf[np.asarray(addr).ravel()] = values.ravel()
    return buf


def unpack(tensor: PlacedTensor, buf: np.ndarray, axes: tuple[Axis, ...], shape: tuple[int, ...]) -> np.ndarray:
    idx = np.indices(shape)
    addr = tensor.address({a.name: idx[i] for i, a in enumerate(axes)})
    return buf[np.asarray(addr)]


def random_operands(conv: ConvSpec, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Input and filter, natural order. The ranges keep every sum below the output's saturation, so a run checks
    every bit of the result: int16 uses [-8, 8) (|sum| < 2^15 for up to 512 MACs per output); int32 [-2^10, 2^10)."""
    rng = np.random.default_rng(seed)
    lim = 8 if conv.bits == 16 else 1 << 10
    dt = np.int16 if conv.bits == 16 else np.int32
    we = conv.extents("W")
    return (rng.integers(-lim, lim, size=conv.stored_input_shape()).astype(dt),
            rng.integers(-lim, lim, size=tuple(we.values())).astype(dt))


def reference(conv: ConvSpec, inp: np.ndarray, wgt: np.ndarray) -> np.ndarray:
    """O in natural order, exact int64 sums (the emulated kernel wraps and saturates; callers apply that). ``inp``
    is the stored input; padding is applied here."""
    st, dl = conv.stride, conv.dilation
    oshape = tuple(conv.extents("O").values())
    out = np.zeros(oshape, dtype=np.int64)
    i64, w64 = conv.pad_input(inp).astype(np.int64), wgt.astype(np.int64)
    for r in range(conv.r):
        for s in range(conv.s):
            for t in range(conv.t):
                sl = [slice(r * dl, r * dl + st * (conv.x - 1) + 1, st),
                      slice(s * dl, s * dl + st * (conv.y - 1) + 1, st)]
                if conv.is_3d:
                    sl.append(slice(t * dl, t * dl + st * (conv.z - 1) + 1, st))
                win = i64[tuple(sl)]
                wrs = w64[r, s, t] if conv.is_3d else w64[r, s]
                if conv.depthwise:
                    out += win * wrs
                else:
                    out += np.tensordot(win, wrs, axes=([win.ndim - 1], [0]))
    return out
