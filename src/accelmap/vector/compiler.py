"""The vectorizing compiler: a convolution and a schedule to a ``VectorProgram``, following the six steps of
Vyasa (Chatarasi et al.): (1) triplets of the unrolled loop body, (2) lazy-store groups, (3) reuse graphs whose
connected components become covering aligned loads (checked against the widest register), (4) fusion of 1D
MACs into the datapath columns, padding the fused dimension with zero taps, with select-parameter synthesis
that rejects what the shuffle network cannot express, (5) interleaving of loads with MACs, and (6) code
emission (``emit_cpp``). Reduction loops are always fully unrolled (the paper's first pruning rule).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from accelmap.errors import AccelmapError
from accelmap.vector import intrinsics as it
from accelmap.vector.conv import OUTPUT_DIMS, ConvSpec, Layout, place
from accelmap.vector.program import Load, Loop, Mac, Register, Store, VectorProgram
from accelmap.vector.select import synth_x, synth_z


class CompileError(AccelmapError):
    """A schedule the compiler rejects (the tuner prunes it); the message says why."""


@dataclass(frozen=True)
class Schedule:
    vector_dim: str                          # output dimension mapped to the lanes: "x" or "k"
    shape: str                               # intrinsic family: mac16 / mac8 (int16), lmac8 (int32)
    unroll: tuple[tuple[str, int], ...]      # unroll-and-jam factor per output dimension
    order: tuple[str, ...]                   # outer loops, outermost first; the last is software-pipelined
    layouts: tuple[tuple[str, Layout], ...]  # tensor -> layout

    def u(self, dim: str) -> int:
        return dict(self.unroll).get(dim, 1)

    def layout(self, tensor: str) -> Layout:
        return dict(self.layouts)[tensor]

    def __str__(self) -> str:
        uj = ",".join(f"{d}{self.u(d)}" for d in ("x", "y", "z", "k"))
        lay = " ".join(f"{t}:{lo}" for t, lo in self.layouts)
        return f"vec {self.vector_dim} {self.shape} U&J {uj} order {''.join(self.order) or '-'} {lay}"


_AXIS_DIM = {"R": "r", "S": "s", "T": "t", "C": "c"}


def fused_dim(conv: ConvSpec, w_layout: Layout) -> str:
    """The reduction dimension fused into the columns: that of the innermost filter layout item indexing one."""
    for item in reversed(w_layout.items):
        d = _AXIS_DIM.get(item.axis)
        if d is not None and not (d == "c" and conv.depthwise):
            return d
    raise CompileError(f"filter layout {w_layout} has no reduction axis to fuse")


def _coords_eval(conv: ConvSpec, tensor: str, loop: dict[str, np.ndarray]) -> dict[str, Any]:
    return {a.name: sum(c * loop[d] for d, c in a.terms) for a in conv.axes[tensor]}


def compile_conv(conv: ConvSpec, sched: Schedule, data_mem_bits: int) -> VectorProgram:
    shape = it.SHAPES[sched.shape]
    if shape.data_bits != conv.bits:
        raise CompileError(f"{shape.name} takes int{shape.data_bits} operands, the workload is int{conv.bits}")
    lanes, cols = shape.lanes, shape.cols
    v = sched.vector_dim
    sizes = conv.sizes
    steps = {d: sched.u(d) * (lanes if d == v else 1) for d in OUTPUT_DIMS}
    for d in OUTPUT_DIMS:
        if sizes[d] % steps[d]:
            raise CompileError(f"{d}={sizes[d]} is not a multiple of {steps[d]} (lanes x unroll-and-jam)")
    align = it.REGISTER_BITS // conv.bits
    f = fused_dim(conv, sched.layout("W")) if cols > 1 else ""
    padded = dict(sizes)
    if f:
        padded[f] = -(-sizes[f] // cols) * cols
    # A covering load may read up to one widest register past the last element it needs, and a zero-padding tap
    # reads input up to (cols - 1) taps past a row (multiplied by zero): the buffers end with that much slack.
    slack = it.MAX_REGISTER_BITS // conv.bits + (cols - 1) * conv.dilation * cols * conv.stride
    placed = {}
    for name in ("I", "W", "O"):
        ext = conv.extents(name)
        if name == "W" and f:
            ax = next(a for a, d in _AXIS_DIM.items() if d == f)
            ext[ax] = padded[f]
        placed[name] = place(name, sched.layout(name), ext, align, slack if name != "O" else 0)
    total_bits = sum(t.size for t in placed.values()) * conv.bits
    if total_bits > data_mem_bits:
        raise CompileError(f"tensors need {total_bits // 8:,} B, more than the {data_mem_bits // 8:,} B data memory")

    def address(tensor: str, loop: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(placed[tensor].address(_coords_eval(conv, tensor, loop)))

    # Outer loops and the per-trip shift of every tensor; it must be one constant, 128-bit aligned.
    loops = []
    zero = {d: np.zeros(1, dtype=np.int64) for d in (*OUTPUT_DIMS, "c", "r", "s", "t")}
    for d in sched.order:
        trips = sizes[d] // steps[d]
        if trips == 1:
            continue
        deltas = []
        for name in ("I", "W", "O"):
            pts = [address(name, {**zero, d: zero[d] + n * steps[d]})[0] for n in range(3)]
            dl = int(pts[1] - pts[0])
            if pts[2] - pts[1] != dl or dl % align:
                raise CompileError(f"{name} does not move by one aligned step per {d} trip in layout "
                                   f"{placed[name].layout}")
            deltas.append((name, dl))
        loops.append(Loop(d, trips, tuple(deltas)))
    if {lp.dim for lp in loops} != {d for d in OUTPUT_DIMS if sizes[d] // steps[d] > 1}:
        raise CompileError(f"loop order {''.join(sched.order)} misses an output loop")

    # Step 1: triplets. One row per (group, reduction point), one column per lane; pad taps marked.
    red = [d for d in ("c", "r", "s", "t") if padded[d] > 1 or d == f]
    red_pts = np.array(list(itertools.product(*[range(padded[d]) for d in red])) or [()], dtype=np.int64)
    if f:   # fused dimension innermost, so consecutive rows are the column chunks
        fi = red.index(f)
        perm = [i for i in range(len(red)) if i != fi] + [fi]
        red = [red[i] for i in perm]
        red_pts = red_pts[:, perm]
        red_pts = red_pts[np.lexsort(red_pts.T[::-1])]
    groups = list(itertools.product(*[range(sched.u(d)) for d in OUTPUT_DIMS]))
    lane = np.arange(lanes)
    i_addr, w_addr, o_addr, pad = [], [], [], []
    for g in groups:
        loop = {d: np.full((len(red_pts), lanes), gi * (lanes if d == v else 1), dtype=np.int64)
                for d, gi in zip(OUTPUT_DIMS, g, strict=True)}
        loop[v] = loop[v] + lane
        for j, d in enumerate(red):
            loop[d] = np.repeat(red_pts[:, j:j + 1], lanes, axis=1)
        for d in ("c", "r", "s", "t"):
            loop.setdefault(d, np.zeros((len(red_pts), lanes), dtype=np.int64))
        i_addr.append(address("I", loop))
        w_addr.append(address("W", loop))
        o_addr.append(address("O", {d: a[:1] for d, a in loop.items()})[0])
        pad.append(loop[f][:, 0] >= sizes[f] if f else np.zeros(len(red_pts), dtype=bool))

    # Step 2: lazy stores. Each group's output vector must be one contiguous aligned store.
    for gi, oa in enumerate(o_addr):
        if np.any(oa != oa[0] + lane) or oa[0] % align:
            raise CompileError(f"output layout {placed['O'].layout} does not make lanes a contiguous aligned vector"
                               f" (group {gi})")

    # Step 3: reuse graphs and covering aligned loads.
    registers: list[Register] = []
    reg_of: dict[tuple[str, int, int], int] = {}       # (tensor, min, max) of a pattern -> register id
    for name, addrs in (("I", i_addr), ("W", w_addr)):
        rows = np.concatenate(addrs)
        lo, hi = rows.min(axis=1), rows.max(axis=1)
        scalar = lo == hi
        for kind in (False, True):
            sel = np.unique(np.stack([lo[scalar == kind], hi[scalar == kind]], axis=1), axis=0)
            comps = _components(sel, adjacent=kind)
            width = it.REGISTER_BITS * 2 // conv.bits
            first_piece = []
            for c0, c1 in comps:
                start = c0 // align * align
                end = -(-(c1 + 1) // align) * align
                first_piece.append((start, len(registers)))
                for ps, pe in (_split(start, end, width) if kind else [(start, end)]):
                    bits = it.register_bits_for((pe - ps) * conv.bits)
                    if not bits:
                        raise CompileError(f"reuse component of {name} spans {(pe - ps) * conv.bits} bits, more than "
                                           f"the {it.MAX_REGISTER_BITS}-bit widest register")
                    registers.append(Register(len(registers), name, ps, bits // conv.bits, bits))
            starts = np.array([c[0] for c in comps], dtype=np.int64)
            for a, b in sel:
                comp_idx = int(np.searchsorted(starts, a, side="right")) - 1
                start, rid = first_piece[comp_idx]
                reg_of[(name, int(a), int(b))] = rid + ((int(a) - start) // width if kind else 0)
    by_id = {r.id: r for r in registers}

    # Step 4: fusion into columns and select-parameter synthesis; step 5: interleaving. Reductions commute, so a
    # group's chunks are issued in the address order of their registers: a register's uses then sit together and
    # its live range stays short (Vyasa's interleaving "shortens live ranges").
    body: list = []
    loaded: set[int] = set()
    last_use: dict[int, int] = {}
    for gi in range(len(groups)):
        ia, wa, pd = i_addr[gi], w_addr[gi], pad[gi]
        chunks = []
        for ch in range(0, len(ia), cols):
            ci, cw = ia[ch:ch + cols], wa[ch:ch + cols]
            ri = {reg_of[("I", int(r.min()), int(r.max()))] for r in ci}
            rw = {reg_of[("W", int(r.min()), int(r.max()))] for r in cw}
            if len(ri) > 1 or len(rw) > 1:
                raise CompileError(f"a fused column chunk reads two registers (group {gi}); fusion needs one each")
            i_reg, w_reg = by_id[ri.pop()], by_id[rw.pop()]
            chunks.append(((i_reg.start, w_reg.start, ch), i_reg, w_reg, ci, cw,
                           int(cols - pd[ch:ch + cols].sum()) * lanes))
        chunks.sort(key=lambda c: c[0])
        for n, (_key, i_reg, w_reg, ci, cw, useful) in enumerate(chunks):
            mac = _fuse(shape, gi, n == 0, i_reg, ci.T, w_reg, cw.T, useful)
            for rid in (mac.xreg, mac.zreg):
                if rid not in loaded:
                    loaded.add(rid)
                    body.append(Load(rid))
            body.append(mac)
            last_use[mac.xreg] = last_use[mac.zreg] = len(body) - 1
        body.append(Store(gi, int(o_addr[gi][0])))
    peak = _peak_live(body, last_use, by_id)
    naive = sum(r.bits for r in registers)
    out_bits = conv.bits
    return VectorProgram(conv, shape, tuple(placed.values()), tuple(loops), tuple(registers), tuple(body),
                         out_bits, peak, naive)


def _components(intervals: np.ndarray, adjacent: bool) -> list[tuple[int, int]]:
    """Connected components of the reuse graph over address intervals: vector loads are joined when they share
    an element (overlapping spans), scalars when they are adjacent in memory."""
    out: list[list[int]] = []
    for a, b in sorted((int(x), int(y)) for x, y in intervals):
        if out and a <= out[-1][1] + (1 if adjacent else 0):
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _split(start: int, end: int, width: int) -> list[tuple[int, int]]:
    """A broadcast component cut into aligned pieces of at most one Z buffer (a broadcast reads one window)."""
    return [(s, min(s + width, end)) for s in range(start, end, width)]


def _fuse(shape: it.MacShape, group: int, first: bool, reg_i: Register, sig_i: np.ndarray, reg_w: Register,
          sig_w: np.ndarray, useful: int) -> Mac:
    """One fused MAC: try the input in X and the filter in Z, then the other way round."""
    for xr, xs, zr, zs in ((reg_i, sig_i, reg_w, sig_w), (reg_w, sig_w, reg_i, sig_i)):
        xsig = xs - xr.start
        xlen = max(xr.elems, shape.x_elems[0])
        if xlen not in shape.x_elems:
            continue
        xp = synth_x(shape, tuple(map(tuple, xsig.tolist())))
        if xp is None:
            continue
        zsig = zs - zr.start
        zwin = int(zsig.min()) // shape.z_elems * shape.z_elems
        zp = synth_z(shape, tuple(map(tuple, (zsig - zwin).tolist())))
        if zp is None:
            continue
        return Mac(group, first, xr.id, xlen, xp, zr.id, zwin, zp, useful)
    raise CompileError(f"the shuffle network cannot express the selection of group {group} "
                       f"(input lanes {sig_i[:, 0].tolist()}, filter lanes {sig_w[:, 0].tolist()})")


def _peak_live(body: list, last_use: dict[int, int], by_id: dict[int, Register]) -> int:
    live = 0
    peak = 0
    ends: dict[int, int] = {}
    for pos, ins in enumerate(body):
        if isinstance(ins, Load):
            live += by_id[ins.reg].bits
            ends.setdefault(last_use.get(ins.reg, pos), 0)
            ends[last_use.get(ins.reg, pos)] += by_id[ins.reg].bits
        peak = max(peak, live)
        live -= ends.pop(pos, 0)
    return peak


def describe_math(prog: VectorProgram) -> str:
    counts = prog.counts()
    issued = counts["mac"] * prog.shape.macs * prog.iterations
    return (f"{prog.iterations} iterations x ({counts['load']} loads, {counts['mac']} {prog.shape.name}, "
            f"{counts['store']} stores); issued {issued:,} MACs for {prog.conv.macs:,} useful "
            f"({100 * prog.conv.macs / issued:.1f}%); registers peak {prog.peak_live_bits} bits interleaved, "
            f"{prog.naive_live_bits} if all loads came first")


