"""The accelerator as plain data: memory levels, fan-outs, compute unit.

Levels are ordered outermost (off-chip) first. A fan-out sits below a level:
it makes ``size`` instances of everything beneath it (the next level, or the
compute unit when it is the innermost level's fan-out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from accelmap.arch.units import format_bits


@dataclass(frozen=True)
class FanoutAxis:
    name: str
    size: int
    multicast: bool = True   # one read of an operand feeds every instance along the axis
    reduce: bool = True      # partial sums along the axis are added in the network


@dataclass(frozen=True)
class Fanout:
    axes: tuple[FanoutAxis, ...]
    # Energy of delivering one word to (or collecting one from) an instance below.
    transfer_energy_pj: float = 0.0

    @property
    def size(self) -> int:
        return math.prod(a.size for a in self.axes)

    def axis(self, name: str) -> FanoutAxis:
        for a in self.axes:
            if a.name == name:
                return a
        raise KeyError(name)

    def __str__(self) -> str:
        return " x ".join(f"{a.name}={a.size}" for a in self.axes)


@dataclass(frozen=True)
class Level:
    name: str
    holds: tuple[str, ...]                       # operand classes it can keep
    capacity_bits: int | None                    # shared capacity; None = unbounded
    partitions: tuple[tuple[str, int], ...] = () # per-class capacity when partitioned
    width_bits: int = 8
    read_energy_pj: float = 0.0                  # per access of one word
    write_energy_pj: float = 0.0
    read_bw_bits: float | None = None            # per cycle per instance; None = unbounded
    write_bw_bits: float | None = None
    double_buffered: bool = False
    bypass: bool = True                          # may a mapping choose not to keep a held class?
    fanout: Fanout | None = None
    instances: int = 1                           # derived: product of fan-outs above
    # Cycles to program one tile transfer (DMA call) into or out of this level,
    # on top of its bits over the bandwidth (Hamdi's thesis on ZigZag in TVM: DMA programming overhead).
    transfer_setup_cycles: int = 0
    # A register written at the clock edge: the next tile is written as the last read of the
    # current one completes, so a refill overlaps the compute without a second tile of storage.
    written_at_clock_edge: bool = False
    # Double-buffered only when two of the mapping's tiles fit (ZigZag decides per mapping so);
    # otherwise single-buffered. A tile must fit the whole capacity.
    double_buffered_when_fits: bool = False
    # Access granularity: the port moves whole granules of this many bits, so an access of w bits
    # costs ceil(w / granularity) granules (ZigZag's bandwidth_min); None = charged by the bit.
    access_granularity_bits: int | None = None
    # An input tile that stays for the whole run (no temporal loop above the level moves it) streams
    # in while compute runs, in pieces in the order the level below takes its tiles (ZigZag's
    # loading within spare port bandwidth); False: loaded whole before the first compute.
    stream_single_tile: bool = False
    # Fan-out axes above this level along which one instance is shared: the instances along such an
    # axis are one (ZigZag's served_dimensions of an accumulator that a column of multipliers reduces
    # into), so the axis's spatial loops lie inside this level's tile and ``instances`` excludes them.
    shared_axes: tuple[str, ...] = ()
    # Cycles each row of a tile transfer read out of this level costs before its data: the memory's
    # latency per read request, which a 2-D DMA pays once per contiguous row it reads (VTA's load unit
    # requests one row at a time). How many rows a tile is depends on the operand's layout
    # (``cost.dma_rows``). 0: reads cost their bits only.
    read_row_cycles: int = 0
    # With ``double_buffered_when_fits``, for a mapping whose tiles do not fit twice: the next tile is
    # written element by element as the current one's elements are read for the last time (ZigZag's
    # rule for a memory it does not double-buffer), so the refill overlaps the compute where the tile
    # is read once, i.e. the outermost loop inside the level's tiles moves every operand it keeps
    # (ZigZag's top irrelevant loops of 1); where a loop re-reads the whole tile, the level stalls.
    refill_while_read: bool = False
    # One port serves the level's reads and writes (AccelForge's default ``total_latency``, the sum of its
    # actions' times): a read and a write take turns on it instead of running on a port each. Its bandwidth is
    # the level's read bandwidth, which must equal the write bandwidth.
    shared_port: bool = False

    def port(self, side: str) -> str:
        """The name of the port a ``side`` ("read" or "write") access of this level uses: one name for both
        sides of a level with a shared port, so that the latency model and the simulator serialize them."""
        return f"{self.name}.port" if self.shared_port else f"{self.name}.{side}"

    def charged_bits(self, elements, bits: int, stream, accesses):
        """Bits charged for ``elements`` elements of ``bits`` bits when they move as part of a stream of
        ``stream`` elements in ``accesses`` equal accesses (numbers or NumPy arrays of whole numbers):
        an access of w bits costs ``ceil(w / granularity)`` granules; by the bit without a granularity."""
        g = self.access_granularity_bits
        if g is None:
            return elements * bits
        acc = np.maximum(np.asarray(accesses, dtype=np.float64), 1.0)
        per = np.maximum(np.asarray(stream, dtype=np.float64), 1.0)
        # exact: a correctly rounded quotient of whole numbers below 2**53 is exact when it is whole
        granules = np.ceil(per * bits / (acc * g))
        return np.asarray(elements, dtype=np.float64) * acc / per * granules * g

    def charged_bits_per_transfer(self, elements, bits: int, stream, counts, shares):
        """Bits charged for ``elements`` elements of ``bits`` bits moving as part of a stream of ``stream``
        elements whose transfers differ in size: ``counts[k]`` transfers each carry ``shares[k]`` parts of
        the stream (K x rows arrays; a transfer's elements are ``shares[k] x stream / sum(counts x
        shares)``). Each transfer is rounded up to whole granules on its own, as ZigZag rounds every
        transfer period; by the bit without a granularity."""
        if self.access_granularity_bits is None:
            return elements * bits
        return self.charged_bits_of_granules(elements, bits, self.transfer_granules(bits, stream, counts, shares))

    def transfer_granules(self, bits: int, stream, counts, shares) -> tuple:
        """What ``charged_bits_per_transfer`` needs of a stream whatever the elements charged (the model charges
        several counts against one stream): (rows where it moves data, its elements or 1, the granules of its
        transfers). The level must have an access granularity."""
        g = self.access_granularity_bits
        assert g is not None
        counts = np.asarray(counts, dtype=np.float64)
        shares = np.asarray(shares, dtype=np.float64)
        total = (counts * shares).sum(axis=0)
        st = np.asarray(stream, dtype=np.float64)
        ok = (total > 0) & (st > 0)
        # elements per share: a whole number wherever every instance moves the same (exact then)
        per_share = np.where(ok, st, 1.0) / np.where(ok, total, 1.0)
        granules = (counts * np.ceil(shares * per_share * bits / g)).sum(axis=0)
        return ok, np.where(ok, st, 1.0), granules

    def charged_bits_of_granules(self, elements, bits: int, granules: tuple):
        """``charged_bits_per_transfer`` from the stream's ``transfer_granules``."""
        g = self.access_granularity_bits
        assert g is not None
        ok, per, n = granules
        return np.where(ok, np.asarray(elements, dtype=np.float64) / per * n * g,
                        np.asarray(elements, dtype=np.float64) * bits)

    @property
    def refills_during_compute(self) -> bool:
        """Do this level's transfers overlap the compute that reads it (double buffer or register)?"""
        return self.double_buffered or self.written_at_clock_edge

    @property
    def partitioned(self) -> bool:
        return bool(self.partitions)

    def capacity_for(self, cls: str) -> int | None:
        if self.partitions:
            return self.partition_bits(cls)
        return self.capacity_bits

    def partition_bits(self, cls: str) -> int:
        """Bits of the partition for operand class ``cls`` of a partitioned level (0: none for it)."""
        return dict(self.partitions).get(cls, 0)

    def describe_capacity(self) -> str:
        if self.partitions:
            return ", ".join(f"{c}: {format_bits(b)}" for c, b in self.partitions)
        return format_bits(self.capacity_bits)


@dataclass(frozen=True)
class Pipeline:
    """Compute-pipeline overheads of an output-stationary datapath (Hamdi's thesis, Eq. 4.1).

    A *result set* is one run of the innermost temporal loops that do not index
    the output (the reduction that produces a set of results). Within it, every
    iteration of those loops over dims other than ``streamed_dims`` is a *row*
    that costs ``row_setup_cycles`` before its MACs stream; every result set
    ends with ``result_overhead_cycles`` (activation, clearing, write-back).
    DIANA: rows are (C, FY) pairs with 2 setup cycles, FX streams, 23 cycles per set.
    """

    row_setup_cycles: int = 0
    result_overhead_cycles: int = 0
    streamed_dims: tuple[str, ...] = ()


@dataclass(frozen=True)
class Compute:
    mac_energy_pj: float
    macs_per_cycle: int = 1
    # Supported operand precision per class, in bits.
    precision: tuple[tuple[str, tuple[int, ...]], ...] = (("I", (8,)), ("W", (8,)), ("O", (32,)))
    pipeline: Pipeline | None = None
    # Precision finished outputs are written at by the output stage (e.g. int32 accumulators
    # requantized to int8 activations); partial sums keep the output operand's precision.
    final_output_bits: int | None = None
    # The vector (scalar) unit beside the multiply-accumulate array: elements a normalization over token rows
    # (softmax, layer norm) processes per cycle, over all its instances (AccelForge's TPU v4i: 128 per core per
    # cycle). None: not described, such passes take no time.
    vector_elements_per_cycle: int | None = None

    def supported_bits(self, cls: str) -> tuple[int, ...]:
        return dict(self.precision).get(cls, ())


@dataclass(frozen=True)
class Accelerator:
    name: str
    levels: tuple[Level, ...]
    compute: Compute
    description: str = ""
    source: str = ""                               # file it came from, for messages
    intrinsics: tuple[tuple[str, object], ...] = field(default=(), compare=False)
    # Identical copies of everything below the outermost level, sharing it and its bandwidth. Only the
    # tuner's cores knob uses it (it splits an outer loop over them); the model, simulator and mapper
    # describe one core.
    cores: int = 1
    # Where a tile spans a whole padded axis of an input, its halo is generated as zeros where it is
    # used, not moved: its transfers carry the stored rows only (ZigZag caps a tile's extent at the
    # stored one). False: the halo moves like data (the index space is counted, as Timeloop does).
    padding_generated: bool = False

    def level(self, name: str) -> Level:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise KeyError(name)

    def fanout_axis(self, level: int, axis: str | None) -> FanoutAxis:
        """Fan-out axis ``axis`` below level ``level``: where a spatial loop (its level and axis) is unrolled."""
        fan = self.levels[level].fanout
        if fan is None or axis is None:
            raise KeyError(f"level {self.levels[level].name} has no fan-out axis {axis!r}")
        return fan.axis(axis)

    def inside(self, c: int, level: int, axis: str | None) -> bool:
        """Is a loop at ``level`` (spatial on fan-out ``axis``, or temporal for None) inside the tiles of
        level ``c`` (below it), rather than above them? Loops at ``c`` and deeper are; a spatial loop
        above ``c`` is too when ``c`` is shared along its axis (``Level.shared_axes``): it then spreads
        one instance's tile over the axis instead of making more instances. ``c`` may be the compute
        unit (``len(levels)``), inside no loop."""
        return level >= c or (axis is not None and c < len(self.levels) and axis in self.levels[c].shared_axes)

    def level_index(self, name: str) -> int:
        for i, lv in enumerate(self.levels):
            if lv.name == name:
                return i
        raise KeyError(name)

    @property
    def num_pes(self) -> int:
        """Compute instances: product of every fan-out."""
        return math.prod(lv.fanout.size for lv in self.levels if lv.fanout)

    @property
    def peak_macs_per_cycle(self) -> int:
        return self.num_pes * self.compute.macs_per_cycle

    def fanout_axes(self) -> dict[str, tuple[int, FanoutAxis]]:
        """Axis name -> (index of the level it sits below, axis)."""
        out = {}
        for i, lv in enumerate(self.levels):
            if lv.fanout:
                for a in lv.fanout.axes:
                    out[a.name] = (i, a)
        return out

    def __str__(self) -> str:
        lines = [f"accelerator {self.name}" + (f" — {self.description}" if self.description else "")
                 + ("; padded halos generated where a tile spans a whole axis" if self.padding_generated else "")]
        for lv in self.levels:
            bw = lambda v, lv=lv: "unbounded" if v is None else f"{v / lv.width_bits:g} words/cycle"
            lines.append(f"  {lv.name:<8} x{lv.instances:<5} holds {'/'.join(lv.holds):<7} "
                         f"{lv.describe_capacity():<28} {lv.width_bits}-bit words, "
                         f"R {lv.read_energy_pj:g} pJ / W {lv.write_energy_pj:g} pJ, "
                         f"BW R {bw(lv.read_bw_bits)} W {bw(lv.write_bw_bits)}"
                         + (", double-buffered" if lv.double_buffered else "")
                         + (", double-buffered when two tiles fit" if lv.double_buffered_when_fits else "")
                         + (", written at the clock edge" if lv.written_at_clock_edge else "")
                         + (", else refilled while read once" if lv.refill_while_read else "")
                         + (", a tile kept for the whole run streams in" if lv.stream_single_tile else "")
                         + (", one port for reads and writes" if lv.shared_port else "")
                         + (f", accessed in {lv.access_granularity_bits}-bit granules"
                            if lv.access_granularity_bits is not None else "")
                         + (f", one instance shared along {','.join(lv.shared_axes)}" if lv.shared_axes else ""))
            if lv.fanout:
                lines.append(f"  {'':8} fan-out {lv.fanout}"
                             f" (multicast: {','.join(a.name for a in lv.fanout.axes if a.multicast) or 'none'};"
                             f" reduce: {','.join(a.name for a in lv.fanout.axes if a.reduce) or 'none'})")
        c = self.compute
        prec = ", ".join(f"{k}:{'/'.join(map(str, v))}" for k, v in c.precision)
        lines.append(f"  compute  x{self.num_pes:<5} {c.macs_per_cycle} MAC/cycle each, "
                     f"{c.mac_energy_pj:g} pJ/MAC, precision bits {prec}")
        return "\n".join(lines)


def shared_port_refusal(levels: tuple[Level, ...], i: int) -> str | None:
    """Why level ``i`` cannot have one port for reads and writes (``Level.shared_port``), or None: its read and
    write bandwidths must be equal (the port's). The latency model and the simulator name both sides' port alike
    (``Level.port``), so every term that schedules transfers serializes them. Above a level that refills while
    computing (double-buffered, or a register written at the clock edge) the model's overlap terms schedule a
    window's loads on the one port but not the drains of the same double buffer beside them: where such a level
    exchanges both an input and the output through the shared port, the model can be below the simulator
    (measured in docs/cost-model.md, "One port above double buffers"); elsewhere it is as close as with two ports."""
    lv = levels[i]
    if lv.read_bw_bits != lv.write_bw_bits:
        return (f"one port for reads and writes needs {lv.name}'s read and write bandwidths equal (the port's), got "
                f"{lv.read_bw_bits} and {lv.write_bw_bits} bits per cycle")
    return None


def adopt_precision(op, arch: Accelerator):
    """The operator with every operand at the accelerator's (first) precision for its class.

    For workloads that state no precision of their own (ONNX graphs without
    quantization, example files): they run at whatever the datapath computes.
    """
    from dataclasses import replace

    ops = tuple(replace(o, bits=arch.compute.supported_bits(o.cls)[0]) for o in op.operands)
    return replace(op, operands=ops)
