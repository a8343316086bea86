"""Workloads whose tensors exceed the data memory: tile the output channels so each tile's kernel fits, run the
tiles one after another, and model the weight stream that refills the memory between them.

Vyasa preloads every workload into the tile's 128 KB data memory and measures the kernel alone; its FC at int32
(a 4096 x 8 int32 filter, 128 KB by itself) cannot be preloaded whole. We split K into the fewest tiles whose
kernel compiles (each tile's filter, input and output in data memory), report the kernel cycles of all tiles
(the paper's preloaded-data methodology, applied per tile), and next to it the cycles when each next tile's
filter is streamed in by DMA during the current tile's compute (double-buffered: two filter tiles resident).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from accelmap.vector.conv import ConvSpec

# AI Engine tile DMA: two stream-to-memory channels of 32 bits per cycle (AM009); assumed all given to weights.
DMA_BITS_PER_CYCLE = 2 * 32


def tile_counts(conv: ConvSpec, lanes: tuple[int, ...]) -> list[int]:
    """Tile counts that split K evenly into tiles the narrowest datapath can still vectorize along k or x."""
    out = []
    n = 2
    while n <= conv.k:
        if conv.k % n == 0 and (any((conv.k // n) % ln == 0 for ln in lanes) or any(conv.x % ln == 0 for ln in lanes)):
            out.append(n)
        n *= 2
    return out


def tile_conv(conv: ConvSpec, tiles: int) -> ConvSpec:
    return replace(conv, name=f"{conv.name}[K/{tiles}]", k=conv.k // tiles)


@dataclass(frozen=True)
class TiledCycles:
    tiles: int
    kernel_cycles: int            # all tiles' kernels, data preloaded per tile
    streamed_cycles: int          # the first tile's filter loaded, then max(compute, next filter stream) per tile
    filter_bits_per_tile: int

    @property
    def stream_bound(self) -> bool:
        return self.streamed_cycles > self.kernel_cycles


def tiled_cycles(conv: ConvSpec, tiles: int, tile_kernel_cycles: int) -> TiledCycles:
    tile = tile_conv(conv, tiles)
    bits = math.prod(tile.extents("W").values()) * conv.bits
    stream = math.ceil(bits / DMA_BITS_PER_CYCLE)
    streamed = stream + (tiles - 1) * max(tile_kernel_cycles, stream) + tile_kernel_cycles
    return TiledCycles(tiles, tiles * tile_kernel_cycles, streamed, bits)


def weight_tile(conv: ConvSpec, wgt: np.ndarray, tiles: int, t: int) -> np.ndarray:
    """Tile ``t`` of a natural-order filter (K is its last axis)."""
    kt = conv.k // tiles
    return wgt[..., t * kt:(t + 1) * kt]
