"""A vector program: outer loops around a straight-line body of aligned loads, 2D-SIMD MACs with synthesized
select parameters, and shift-round-saturate stores; plus its execution on the NumPy emulator."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accelmap.vector import intrinsics as it
from accelmap.vector.conv import ConvSpec, PlacedTensor, pack, random_operands, reference, unpack


@dataclass(frozen=True)
class Register:
    """A grouped vector register: ``elems`` elements loaded from ``tensor`` at body offset ``start``."""

    id: int
    tensor: str
    start: int
    elems: int
    bits: int


@dataclass(frozen=True)
class Load:
    reg: int


@dataclass(frozen=True)
class Mac:
    acc: int                       # lazy-store group
    first: bool                    # mul (start the accumulator) instead of mac
    xreg: int
    xlen: int                      # X buffer elements (the register, zero-extended to a legal X width)
    xparams: tuple[int, ...]
    zreg: int
    zwin: int                      # first element of the Z window within the Z register
    zparams: tuple[int, ...]
    useful: int                    # MACs of the op that are not zero padding


@dataclass(frozen=True)
class Store:
    acc: int
    offset: int                    # element offset in O within the body


Instr = Load | Mac | Store


@dataclass(frozen=True)
class Loop:
    dim: str
    trips: int
    deltas: tuple[tuple[str, int], ...]   # tensor -> element shift per trip


@dataclass(frozen=True)
class VectorProgram:
    conv: ConvSpec
    shape: it.MacShape
    tensors: tuple[PlacedTensor, ...]
    loops: tuple[Loop, ...]               # outermost first; the last one is the software-pipelined loop
    registers: tuple[Register, ...]
    body: tuple[Instr, ...]
    out_bits: int
    peak_live_bits: int                   # vector registers live at once in the interleaved body
    naive_live_bits: int                  # ... if all loads came first (Vyasa step 5's baseline)
    notes: tuple[str, ...] = ()

    def tensor(self, name: str) -> PlacedTensor:
        return next(t for t in self.tensors if t.name == name)

    @property
    def iterations(self) -> int:
        n = 1
        for lp in self.loops:
            n *= lp.trips
        return n

    @property
    def macs_per_body(self) -> int:
        return sum(1 for i in self.body if isinstance(i, Mac))

    def counts(self) -> dict[str, int]:
        return {"mac": self.macs_per_body, "load": sum(1 for i in self.body if isinstance(i, Load)),
                "store": sum(1 for i in self.body if isinstance(i, Store))}

    def bases(self) -> dict[str, np.ndarray]:
        """Per tensor, the element base of every iteration (loop order, outermost slowest)."""
        grids = np.indices([lp.trips for lp in self.loops]).reshape(len(self.loops), -1) if self.loops else \
            np.zeros((0, 1), dtype=np.int64)
        out = {}
        for t in self.tensors:
            b = np.zeros(grids.shape[1], dtype=np.int64)
            for lp, g in zip(self.loops, grids, strict=True):
                b += dict(lp.deltas)[t.name] * g
            out[t.name] = b
        return out


def dtype_of(bits: int):
    return np.int16 if bits == 16 else np.int32


def run_emulated(prog: VectorProgram, inp_buf: np.ndarray, wgt_buf: np.ndarray) -> np.ndarray:
    """Execute every iteration of the body at once (iterations write disjoint outputs) on the emulator."""
    out_t = prog.tensor("O")
    out = np.zeros(out_t.size, dtype=dtype_of(prog.out_bits))
    mem = {"I": inp_buf, "W": wgt_buf}
    bases = prog.bases()
    regs: dict[int, np.ndarray] = {}
    accs: dict[int, np.ndarray] = {}
    by_id = {r.id: r for r in prog.registers}
    shape = prog.shape
    for ins in prog.body:
        if isinstance(ins, Load):
            r = by_id[ins.reg]
            regs[r.id] = it.aligned_load(mem[r.tensor], bases[r.tensor] + r.start, r.elems)
        elif isinstance(ins, Mac):
            accs[ins.acc] = execute_mac(shape, ins, regs[ins.xreg], regs[ins.zreg],
                                        None if ins.first else accs[ins.acc])
        else:
            it.aligned_store(out, bases["O"] + ins.offset, it.srs(accs.pop(ins.acc), 0, prog.out_bits))
    return out


def execute_mac(shape: it.MacShape, ins: Mac, xreg: np.ndarray, zreg: np.ndarray, acc: np.ndarray | None) -> np.ndarray:
    """One vector MAC (``mul`` when ``acc`` is None) on the X and Z register contents, with its select parameters."""
    x = _widen(xreg, ins.xlen)
    z = _widen(zreg, ins.zwin + shape.z_elems)[:, ins.zwin:ins.zwin + shape.z_elems]
    xp, (zs, zo, zhi, zst) = ins.xparams, ins.zparams
    if shape is it.MAC16:
        return it.mac16(acc, x, xp[0], xp[1], xp[2], xp[3], z, zs, zo, zhi, zst)
    if shape is it.MAC8:
        return it.mac8(acc, x, xp[0], xp[1], xp[2], xp[3], z, zs, zo, zst)
    return it.lmac8(acc, x, xp[0], xp[1], z, zs, zo)


def _widen(reg: np.ndarray, n: int) -> np.ndarray:
    """A register zero-extended to ``n`` elements (the upper part of a grouped register left unused)."""
    if reg.shape[-1] >= n:
        return reg
    return np.concatenate([reg, np.zeros((reg.shape[0], n - reg.shape[-1]), dtype=reg.dtype)], axis=1)


def packed_operands(prog: VectorProgram, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Random input and filter (natural order) and their packed buffers."""
    inp, wgt = random_operands(prog.conv, seed)
    return (inp, wgt, *pack_operands(prog, inp, wgt))


def pack_operands(prog: VectorProgram, inp: np.ndarray, wgt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    conv = prog.conv
    dt = dtype_of(conv.bits)
    return (pack(prog.tensor("I"), conv.pad_input(inp), conv.axes["I"], dt),
            pack(prog.tensor("W"), wgt, conv.axes["W"], dt))


def expected_output(prog: VectorProgram, inp: np.ndarray, wgt: np.ndarray, conv: ConvSpec | None = None) -> np.ndarray:
    """The reference result as the datapath produces it: accumulator wrap, then srs(0) saturation (of ``conv``,
    the whole workload of a tiled kernel, or by default the program's)."""
    ref = reference(conv or prog.conv, inp, wgt)
    if prog.shape.acc_bits < 64:
        ref = it.wrap_signed(ref, prog.shape.acc_bits)
    return it.srs(ref, 0, prog.out_bits)


def output_of(prog: VectorProgram, out_buf: np.ndarray) -> np.ndarray:
    conv = prog.conv
    return unpack(prog.tensor("O"), out_buf, conv.axes["O"], tuple(conv.extents("O").values()))
