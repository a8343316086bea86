"""Emit the C program of a whole network and build it.

The program is a folder: ``main.c`` (the host operators, the buffers, the order of the steps and a
``main``), one ``layer_N.c`` per distinct accelerator layer and data type (the intrinsic program
``codegen.intrinsic_c`` writes for the layer's embedding, or the tile program ``codegen`` writes for
its mapping, with entry point ``layer_N``), ``weights.bin``
(every constant the steps read, in the order ``main`` reads them) and a ``Makefile``. One compile
command builds it with the host's C compiler:

    cc -O2 -std=c99 -ffp-contract=off -o net main.c layer_*.c -lm

``./net weights.bin input.bin output.bin [DUMP_DIR]`` reads the graph inputs (concatenated, graph
order, raw little-endian), runs one inference and writes the graph outputs the same way. It prints
one line per step: ``step INDEX SECONDS`` and, for an accelerator step, ``counters INDEX`` followed
by the layer's counters: for a tile program its transfer counters (levels x operands x fills, reads,
updates, drains), for an intrinsic program the intrinsic calls issued and the packed elements per
operand (it has no memory hierarchy to count transfers in). With
``DUMP_DIR`` it also writes every step's output to ``DUMP_DIR/VALUE_INDEX.bin`` for the per-layer
comparison.
"""

from __future__ import annotations

import math
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.codegen.build import BuildError, compiler
from accelmap.codegen.c_source import c_type as operand_c_type
from accelmap.codegen.c_source import generate_c, stored_shape
from accelmap.codegen.fused_c import JoinC, StageC, block_elements, counter_count, fused_group_c
from accelmap.codegen.intrinsic_c import generate_intrinsic_c
from accelmap.compile.fused_groups import FusedGroup, InnerJoinPlan
from accelmap.compile.graph import NetGraph
from accelmap.compile.host_ops import (
    ELEM_SIZES,
    TYPE_CODES,
    HostWork,
    bcast_strides,
    block_gemm_bias,
    block_lines,
    c_floats,
    c_ints,
    c_longs,
    host_lines,
    qlinear_add_call,
)
from accelmap.compile.host_runtime import HOST_C
from accelmap.compile.intrinsic_choice import IntrinsicChoice, selected_programs, why_not
from accelmap.compile.partition import Step, q_range
from accelmap.errors import SpecError
from accelmap.fusion.geometry import Join
from accelmap.search.model_result import LayerMapping
from accelmap.workload.onnx_ops import attrs

NP_OF_C = {"float": np.float32, "int8_t": np.int8, "uint8_t": np.uint8, "int16_t": np.int16,
           "int32_t": np.int32, "int64_t": np.int64}
CFLAGS = ["-O2", "-std=c99", "-ffp-contract=off"]
# -ffp-contract=off and explicit fmaf calls fix the floating-point results, so every level gives the same bits;
# -O0 builds ~4x faster (the tests' small networks run in milliseconds either way).
OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os")


@dataclass(frozen=True)
class LayerCode:
    """One distinct accelerator layer in one data type: its function, the file it is in and which program it is."""

    function: str
    layer: LayerMapping
    dtype: str
    file: str
    intrinsic: IntrinsicChoice | None = None     # the intrinsic program it runs; None: the mapper's tile program
    reason: str = ""                             # why it runs this program

    @property
    def runs(self) -> str:
        return f"intrinsic program ({self.intrinsic.intrinsic})" if self.intrinsic else "tile program (mapper)"

    def counter_count(self, levels: int) -> int:
        """Length of the counters the function fills: calls and packed elements per operand for an intrinsic
        program, fills/reads/updates/drains per level and operand for a tile program."""
        n = len(self.layer.layer.operator.operands)
        return 1 + n if self.intrinsic else levels * n * 4


@dataclass
class Program:
    folder: Path
    steps: list[Step]
    layers: dict[str, LayerCode]                    # step name -> its layer's code
    values: list[tuple[str, str, tuple[int, ...]]]  # dumped values: (name, C type, shape), index = file name
    inputs: list[tuple[str, str, tuple[int, ...]]]
    outputs: list[tuple[str, str, tuple[int, ...]]]
    executable: Path | None = None
    generate_s: float = 0.0
    build_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    # accelerator step name -> the host work its C does around the layer call (operand conversion, epilogue,
    # a transposed convolution's transpose and scatter); ``packing``: an intrinsic program's operand packing
    host_work: dict[str, HostWork] = field(default_factory=dict)
    packing: dict[str, HostWork] = field(default_factory=dict)
    groups: list[FusedGroup] = field(default_factory=list)      # fused groups (``--fuse``), each one step
    # C files of the fused groups' weight fetch programs (``codegen.fused_weights``), one translation unit each
    fetch_files: list[str] = field(default_factory=list)

    @property
    def source_files(self) -> list[str]:
        """The C files the program is built from, relative to its folder."""
        return ["main.c"] + sorted({c.file for c in self.layers.values()}) + self.fetch_files

    @property
    def c_files(self) -> list[Path]:
        return [self.folder / f for f in self.source_files]


class _Emitter:
    """Names buffers and collects what main.c declares."""

    def __init__(self, g: NetGraph):
        self.g = g
        self.ids: dict[str, str] = {}
        self.decls: list[str] = []
        self.weights: list[tuple[str, np.ndarray]] = []   # (C name, data) in file order
        self.tmp = 0

    def value(self, name: str) -> str:
        if name in self.ids:
            return self.ids[name]
        g = self.g
        ct = g.c_type(name)
        cid = f"v{len(self.ids)}"
        self.ids[name] = cid
        n = max(g.size(name), 1)
        if name in g.consts:
            self.decls.append(f"static {ct} {cid}[{n}];  /* constant {name} */")
            self.weights.append((cid, np.ascontiguousarray(g.consts[name], dtype=NP_OF_C[ct]).reshape(-1)))
        else:
            self.decls.append(f"static {ct} {cid}[{n}];  /* {name} {list(g.shape(name))} */")
        return cid

    def constant(self, ct: str, data: np.ndarray, what: str) -> str:
        cid = f"w{len(self.weights)}"
        self.decls.append(f"static {ct} {cid}[{max(data.size, 1)}];  /* {what} */")
        self.weights.append((cid, np.ascontiguousarray(data, dtype=NP_OF_C[ct]).reshape(-1)))
        return cid

    def temp(self, ct: str, n: int, what: str) -> str:
        self.tmp += 1
        cid = f"t{self.tmp}"
        self.decls.append(f"static {ct} {cid}[{max(n, 1)}];  /* {what} */")
        return cid


def _accel_lines(s: Step, idx: int, code: LayerCode, g: NetGraph, em: _Emitter, nlev: int,
                 work: HostWork) -> list[str]:
    """The call of an accelerator layer, with the host's conversions before and its epilogue after (their
    reads and writes are added to ``work``)."""
    lm = code.layer
    op = lm.layer.operator
    node = s.node
    lines: list[str] = []
    args: list[str] = []
    y = s.outputs[0]
    out_operand = op.operands[0]
    if not out_operand.is_output:
        raise SpecError(f"layer {op.name}: the output is expected as the first operand", where=g.source)
    n_out = math.prod(stored_shape(op, out_operand)[0])
    if node.op_type == "ConvTranspose":
        return _conv_transpose_lines(s, idx, code, g, em, nlev, work)
    if n_out != g.size(y):
        raise SpecError(f"node {s.name!r}: the layer's output has {n_out} elements, the graph's {y!r} "
                        f"{g.size(y)}", where=g.source)
    acc_t = operand_c_type(out_operand, code.dtype)[0]
    if code.dtype == "fp32":
        acc = em.value(y)
    else:
        acc = em.temp(acc_t, n_out, f"sums of {s.name}")
    lines.append(f"memset({acc}, 0, sizeof {acc});")
    args.append(acc)
    for k, X in enumerate(op.operands[1:]):
        src = node.input[k]
        n = math.prod(stored_shape(op, X)[0])
        ct = operand_c_type(X, code.dtype)[0]
        if code.dtype == "fp32":
            if g.size(src) != n:
                raise SpecError(f"node {s.name!r}: operand {X.name} has {n} elements, input {src!r} "
                                f"{g.size(src)}; this layout is not handled", where=g.source)
            if g.c_type(src) != "float":
                raise SpecError(f"node {s.name!r}: input {src!r} is {g.c_type(src)}, not float", where=g.source)
            args.append(em.value(src))
            continue
        assert s.qin is not None and s.qw is not None and s.weight_q is not None
        if k == 0:
            xq = s.inputs[0]
            if g.size(xq) != n:
                raise SpecError(f"node {s.name!r}: operand {X.name} has {n} elements, input {xq!r} "
                                f"{g.size(xq)}", where=g.source)
            zp = int(s.qin.zero_point[0])
            lo, hi = (-(1 << (X.bits - 1)), (1 << (X.bits - 1)) - 1)
            qlo, qhi = q_range(s.qin.elem)
            if qlo - zp < lo or qhi - zp > hi:
                raise SpecError(f"node {s.name!r}: the quantized input less its zero point ({qlo - zp}..{qhi - zp}) "
                                f"does not fit the accelerator's {X.bits}-bit operand; quantize activations "
                                f"symmetrically (zero point 0, int8)", where=g.source)
            if zp == 0 and ct == g.c_type(xq):
                args.append(em.value(xq))
            else:
                t = em.temp(ct, n, f"{X.name} of {s.name} less its zero point")
                lines.append(f"to_operand({em.value(xq)}, {TYPE_CODES[g.c_type(xq)]}, {t}, {TYPE_CODES[ct]}, "
                             f"{n}L, {zp});")
                work.add(n, ELEM_SIZES[g.c_type(xq)], n, ELEM_SIZES[ct])
                args.append(t)
        else:
            args.append(em.constant(ct, integer_weight(s, X.bits, n, g), f"{X.name} of {s.name}"))
    ncnt = code.counter_count(nlev)
    lines.append(f"{{ void *T[] = {{{', '.join(args)}}}; static long long cnt[{ncnt}];")
    lines.append(f"  {code.function}(T, cnt); print_counters({idx}, cnt, {ncnt}); }}")
    lines += _epilogue(s, g, em, acc, acc_t, y, n_out, work)
    return lines


def integer_weight(s: Step, bits: int, n: int, g: NetGraph) -> np.ndarray:
    """An integer product's weight less its zero point (per tensor or per channel), checked to fit the
    accelerator's ``bits``-bit operand of ``n`` elements."""
    assert s.qw is not None and s.weight_q is not None
    wq = s.weight_q.astype(np.int64)
    zpw = s.qw.zero_point
    if zpw.size > 1:
        shape = [1] * wq.ndim
        shape[s.qw.axis % wq.ndim] = zpw.size
        wq = wq - zpw.reshape(shape)
    else:
        wq = wq - int(zpw[0])
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if wq.min(initial=0) < lo or wq.max(initial=0) > hi or wq.size != n:
        raise SpecError(f"node {s.name!r}: the weight less its zero point does not fit the accelerator's "
                        f"{bits}-bit operand (or its layout differs)", where=g.source)
    return wq


def conv_transpose_pads(s: Step, g: NetGraph, auto: str, strides: list[int], dil: list[int], out_pad: list[int],
                        ins: list[int], kernel: list[int], outs: list[int]) -> list[int]:
    """The pads (begin..., end...) of a ConvTranspose whose output size is set by ``output_shape`` or by auto_pad
    SAME (output = input x stride), as ONNX defines them and onnxruntime computes them: the total padding is
    ``stride * (in - 1) + output_padding + (kernel - 1) * dilation + 1 - out``; SAME_UPPER puts ``total // 2``
    at the beginning (the extra one at the end), SAME_LOWER and NOTSET (``output_shape``) ``total - total // 2``."""
    begin, end = [], []
    for i, (st, d, op_, n, k, o) in enumerate(zip(strides, dil, out_pad, ins, kernel, outs, strict=True)):
        total = st * (n - 1) + op_ + (k - 1) * d + 1 - o
        if total < 0:
            raise SpecError(f"node {s.name!r} (ConvTranspose): output size {o} on axis {i + 2} is larger than the "
                            f"input gives ({o + total}); add output_padding", where=g.source)
        b = total // 2 if auto == "SAME_UPPER" else total - total // 2
        begin.append(b)
        end.append(total - b)
    return begin + end


def _conv_transpose_lines(s: Step, idx: int, code: LayerCode, g: NetGraph, em: _Emitter, nlev: int,
                          work: HostWork) -> list[str]:
    """A transposed convolution as the importer's GEMM (per group) between two host steps.

    The host transposes the input X[N, G*Cg, H, W] to A[G, N*H*W, Cg]; the accelerator computes
    O[g, n*h*w, kk*r*s] = sum_c A[g, n*h*w, c] * W[g*Cg + c, kk, r, s] (the weight's own layout); the
    host scatters O onto the output (col2im) and adds the bias. No zeros are inserted: every product
    the accelerator computes is one of the N*C*H*W*Kg*R*S products of the definition.
    """
    node, op = s.node, code.layer.layer.operator
    a = attrs(node)
    x, w, y = node.input[0], node.input[1], s.outputs[0]
    if code.dtype != "fp32":
        raise SpecError(f"node {s.name!r} (ConvTranspose): only float transposed convolutions are compiled",
                        where=g.source)
    auto = a.get("auto_pad", "NOTSET")
    if auto not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise SpecError(f"node {s.name!r} (ConvTranspose): auto_pad {auto!r}; valid: NOTSET, VALID, SAME_UPPER, "
                        "SAME_LOWER", where=g.source)
    if w not in g.consts:
        raise SpecError(f"node {s.name!r} (ConvTranspose): the weight {w!r} must be a constant", where=g.source)
    xs, ws, ys = g.shape(x), g.shape(w), g.shape(y)
    sp = len(xs) - 2
    if sp not in (1, 2):
        raise SpecError(f"node {s.name!r} (ConvTranspose): {sp}-D is not handled (1-D and 2-D are)", where=g.source)
    grp = int(a.get("group", 1))
    n, c = xs[0], xs[1]
    cg, kg = c // grp, ws[1]
    hin, win = (1, xs[2]) if sp == 1 else (xs[2], xs[3])
    kr, ks = (1, ws[2]) if sp == 1 else (ws[2], ws[3])
    oh, ow = (1, ys[2]) if sp == 1 else (ys[2], ys[3])
    strides = list(a.get("strides", [1] * sp))
    dil = list(a.get("dilations", [1] * sp))
    if auto == "VALID" and a.get("output_shape"):
        raise SpecError(f"node {s.name!r} (ConvTranspose): output_shape with auto_pad VALID is not handled; use "
                        "NOTSET, SAME_UPPER or SAME_LOWER with it", where=g.source)
    pads = list(a.get("pads", [0] * 2 * sp)) if auto == "NOTSET" else [0] * 2 * sp
    if auto.startswith("SAME") or (auto == "NOTSET" and a.get("output_shape")):
        pads = conv_transpose_pads(s, g, auto, strides, dil, list(a.get("output_padding", [0] * sp)),
                                   list(xs[2:]), list(ws[2:]), list(ys[2:]))
    sh, sw = (1, strides[0]) if sp == 1 else strides
    dh, dw = (1, dil[0]) if sp == 1 else dil
    ph, pw = (0, pads[0]) if sp == 1 else (pads[0], pads[1])
    n_a = math.prod(stored_shape(op, op.operands[1])[0])
    n_o = math.prod(stored_shape(op, op.operands[0])[0])
    if n_a != g.size(x) or n_o != grp * n * hin * win * kg * kr * ks:
        raise SpecError(f"node {s.name!r} (ConvTranspose): the layer's operands do not match the node's "
                        f"shapes (input {list(xs)}, weight {list(ws)})", where=g.source)
    lines = []
    # X[n, g, c, h, w] -> A[g, n, h, w, c]: the transpose's output axes and the input strides they walk
    xstr = [c * hin * win, cg * hin * win, hin * win, win, 1]
    ashape = [grp, n, hin, win, cg]
    astr = [xstr[1], xstr[0], xstr[3], xstr[4], xstr[2]]
    at = em.temp("float", n_a, f"input of {s.name} as GEMM rows [group, pixel, channel]")
    lines.append(f"transpose((const char *){em.value(x)}, (char *){at}, 4, 5, {c_longs(ashape)}, {c_longs(astr)});")
    work.add(n_a, 4, n_a, 4)
    acc = em.temp("float", n_o, f"products of {s.name} [group, pixel, tap]")
    lines.append(f"memset({acc}, 0, sizeof {acc});")
    ncnt = code.counter_count(nlev)
    lines.append(f"{{ void *T[] = {{{acc}, {at}, {em.value(w)}}}; static long long cnt[{ncnt}];")
    lines.append(f"  {code.function}(T, cnt); print_counters({idx}, cnt, {ncnt}); }}")
    lines.append(f"col2im({acc}, {em.value(y)}, {grp}L, {n}L, {hin}L, {win}L, {kg}L, {kr}L, {ks}L, {oh}L, {ow}L, "
                 f"{sh}L, {sw}L, {dh}L, {dw}L, {ph}L, {pw}L);")
    work.add(n_o, 4, g.size(y), 4)
    if len(node.input) > 2 and node.input[2]:
        work.add(g.size(y), 4, g.size(y), 4)
        lines.append(f"add_channel_bias({em.value(y)}, {g.size(y)}L, {oh * ow}L, {grp * kg}L, "
                     f"{em.value(node.input[2])});")
    return lines


def _out_channels(s: Step, g: NetGraph, y: str, nch: int) -> tuple[int, int]:
    shape = g.shape(y)
    if nch <= 1:
        return 1, 1
    if s.node.op_type == "Conv":
        return int(np.prod(shape[2:])), shape[1]
    return 1, shape[-1]


def _epilogue(s: Step, g: NetGraph, em: _Emitter, acc: str, acc_t: str, y: str, n_out: int,
              work: HostWork, block: tuple[str, str] | None = None) -> list[str]:
    """The host's lines after the layer call: the bias of a float product (added into ``acc``), or the
    requantization of an integer product's sums ``acc`` into ``y``. With ``block`` = (elements, elements per
    channel) as C expressions, the epilogue of one block of a fused group (channel-major): ``y`` is then a C
    buffer, not a value, and ``work`` is left to the caller."""
    node = s.node
    a = attrs(node)
    if node.op_type == "Gemm" and (a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0):
        raise SpecError(f"node {s.name!r} (Gemm): alpha and beta other than 1 are not handled", where=g.source)
    if block is not None and node.op_type not in ("Conv", "MatMul", "Gemm"):
        raise SpecError(f"node {s.name!r} ({node.op_type}): fused groups run convolutions and matrix products "
                        "only", where=g.source)
    has_bias = node.op_type in ("Conv", "Gemm") and len(node.input) > 2 and bool(node.input[2])
    y_c = y if block is not None else em.value(y)
    n_c = block[0] if block is not None else f"{n_out}L"
    if s.dtype == "fp32":
        if not has_bias:
            return []
        if block is None:
            work.add(n_out, 4, n_out, 4)
        b = node.input[2]
        if node.op_type == "Gemm" and block is not None:
            # a block is channel-major: a bias per output feature (or a scalar) is a channel bias
            return [f"add_channel_bias({acc}, {block[0]}, {block[1]}, {block_gemm_bias(s, g)}L, {em.value(b)});"]
        if node.op_type == "Conv":
            inner, nch = _out_channels(s, g, s.outputs[0], 2)
            inner_c = block[1] if block is not None else f"{inner}L"
            return [f"add_channel_bias({acc}, {n_c}, {inner_c}, {nch}L, {em.value(b)});"]
        shape = g.shape(y)
        sb = bcast_strides(g.shape(b), shape)
        sa = bcast_strides(shape, shape)
        return [f"bcast_binary(0, {acc}, {em.value(b)}, {acc}, {len(shape)}, {c_longs(shape)}, {c_longs(sa)}, "
                f"{c_longs(sb)});"]
    assert s.qin is not None and s.qw is not None and s.qout is not None
    scale = (np.float32(s.qin.scale[0]) * s.qw.scale.astype(np.float32) / np.float32(s.qout.scale[0]))
    scale = scale.astype(np.float32)
    nch = scale.size
    if s.bias_q is not None:
        nch = max(nch, s.bias_q.size)
    y_val = s.outputs[0]
    inner, nch_eff = _out_channels(s, g, y_val, nch)
    if nch > 1 and nch != nch_eff:
        raise SpecError(f"node {s.name!r}: {nch} per-channel values for {nch_eff} output channels", where=g.source)
    scales = np.broadcast_to(scale, (nch,)) if nch > 1 else scale
    bias = "NULL"
    if s.bias_q is not None:
        bias = c_ints(np.broadcast_to(s.bias_q, (nch,)), "int32_t") if nch > 1 else c_ints(s.bias_q, "int32_t")
    lo, hi = q_range(s.qout.elem)
    if block is None:
        work.add(n_out, ELEM_SIZES[acc_t], n_out, ELEM_SIZES[g.c_type(y)])
    inner_c = block[1] if block is not None and nch > 1 else f"{inner}L"
    return [f"requantize({acc}, {TYPE_CODES[acc_t]}, {y_c}, {TYPE_CODES[g.c_type(y_val)]}, {n_c}, {inner_c}, "
            f"{nch}L, {bias}, {c_floats(scales)}, {int(s.qout.zero_point[0])}, {lo}, {hi});"]


# The first value of a max pool over an element type
MAX_INIT = {"float": "-INFINITY", "int8_t": "INT8_MIN", "uint8_t": "0", "int16_t": "INT16_MIN", "int32_t": "INT32_MIN"}


def _fused_group_code(grp: FusedGroup, steps: list[Step], g: NetGraph, em: _Emitter) -> str:
    """The C function of a fused group (``codegen.fused_c``): every operator's block, then its epilogue on the
    block (the step's own bias or requantization, then the host steps the plan folds into it), one buffer of the
    largest block per intermediate value. Its host work (each epilogue op reads and writes every computed
    element, recomputed halos included) goes to ``grp.host_work``."""
    c = grp.cost
    blocks = block_elements(grp.stages, c.tile_rows, c.tile_cols, c.policies, c.join, c.skip_policy or "re-read",
                            c.inner_joins)
    specs: list[StageC] = []
    inner: list[JoinC] = []
    in_type = g.c_type(grp.input)
    cur_type = in_type
    inner_at = {x.tensor: x for x in grp.inner}
    for j in range(len(grp.stages)):
        if j in inner_at:       # the add inside the group on the previous stage's block, then its host steps
            jc = _inner_join_code(grp, inner_at[j], steps, g, em, cur_type, blocks[j - 1])
            inner.append(jc)
            cur_type = jc.leaves
        ms = grp.macs.get(j)
        ops: list[tuple[str, Step | None]] = []     # (output C type, host step or None: the operator's own epilogue)
        weights, zp, weight_t = "", 0, ""
        if ms is not None:
            s = steps[grp.step_of[j]]
            op = ms.operator
            W = op.operands[2]
            if s.dtype == "int":
                assert s.qin is not None
                acc_t = operand_c_type(op.operands[0], "int")[0]
                wn = math.prod(stored_shape(op, W)[0])
                weight_t = operand_c_type(W, "int")[0]
                weights = em.constant(weight_t, integer_weight(s, W.bits, wn, g),
                                      f"{W.name} of {s.name} (fused group {grp.index})")
                zp = int(s.qin.zero_point[0])
                ops.append((g.c_type(s.outputs[0]), None))
            else:
                acc_t = weight_t = "float"
                weights = em.value(s.node.input[1])
                if len(s.node.input) > 2 and s.node.input[2]:
                    ops.append(("float", None))
        else:
            acc_t = cur_type
        ops += [(g.c_type(steps[p].outputs[0]), steps[p]) for p in grp.epilogues[j]]
        out_t = ops[-1][0] if ops else acc_t
        comp = grp.computed(j)
        for k, (t, _) in enumerate(ops):
            prev_t = acc_t if k == 0 else ops[k - 1][0]
            grp.host_work.add(comp, ELEM_SIZES[prev_t], comp, ELEM_SIZES[t])

        def epilogue(blk: str, out: str, n: str, inner: str, j=j, ops=ops, acc_t=acc_t) -> list[str]:
            lines: list[str] = []
            cur = blk
            for k, (t, hs) in enumerate(ops):
                dst = out if k == len(ops) - 1 else em.temp(t, blocks[j], f"fused group block, stage {j}, op {k}")
                if hs is None:
                    s = steps[grp.step_of[j]]
                    lines += _epilogue(s, g, em, cur, acc_t, dst, 0, HostWork(), block=(n, inner))
                    if s.dtype == "fp32":           # the bias is added in place
                        lines.append(f"memcpy({dst}, {cur}, sizeof(float) * (size_t){n});")
                else:
                    lines += block_lines(hs, g, cur, dst, n, inner, grp.channel_axis, em.value)
                cur = dst
            return lines

        specs.append(StageC(acc_t, out_t, weights=weights, zero_point=zp, acc_init=MAX_INIT.get(acc_t, "0"),
                            epilogue=epilogue if ops else None, pool=grp.pools.get(j, "max"), weight_type=weight_t))
        cur_type = out_t
    join = _join_code(grp, steps, g, cur_type) if grp.join_step is not None else None
    if (join.out_type if join else cur_type) != g.c_type(grp.output):
        raise SpecError(f"fused group {grp.label}: its last stage leaves {cur_type}, its output "
                        f"{grp.output!r} is {g.c_type(grp.output)}", where=g.source)
    return fused_group_c(grp.name, grp.stages, grp.macs, c.tile_rows, c.tile_cols, c.policies,
                         tuple(specs), in_type, join, tuple(inner), grp.weights, c.head_tile, grp.programs)


def _join_code(grp: FusedGroup, steps: list[Step], g: NetGraph, block_type: str) -> JoinC:
    """The residual add a group ends with, on each output block: onnxruntime's QLinearAdd for a QDQ add (its
    inputs in the step's order: the kernel's rounding is not symmetric in them), a float add otherwise. Its
    host work: both blocks read, the output written, once per output element."""
    assert grp.join_step is not None and grp.skip is not None and grp.cost.join is not None
    add = steps[grp.join_step]
    lines, out_t, skip_t = _add_lines(grp, add, grp.skip, grp.join_chain_first, g, block_type, g.size(add.outputs[0]))
    return JoinC(grp.cost.join, grp.cost.skip_policy or "re-read", skip_t, out_t, lines)


def _add_lines(grp: FusedGroup, add: Step, skip: str, chain_first: bool, g: NetGraph, block_type: str, n_out: int):
    """(the C lines of a residual add on a block, its output type, its skip's type); its host work (both blocks
    read, the output written, ``n_out`` elements each) goes to ``grp.host_work``."""
    out_t, skip_t = g.c_type(add.outputs[0]), g.c_type(skip)
    chain_value = add.inputs[0 if chain_first else 1]
    if g.c_type(chain_value) != block_type:
        raise SpecError(f"fused group {grp.label}: the add {add.name} reads {g.c_type(chain_value)}, its block is "
                        f"{block_type}", where=g.source)
    grp.host_work.add(n_out, ELEM_SIZES[block_type], 0, 0)
    grp.host_work.add(n_out, ELEM_SIZES[skip_t], n_out, ELEM_SIZES[out_t])

    def lines(block: str, skip: str, out: str, n: str) -> list[str]:
        a, b = (block, skip) if chain_first else (skip, block)
        if add.op_type == "Add (QDQ)":
            return [qlinear_add_call(add, g, a, b, out, n)]
        return [f"for (long i = 0; i < {n}; i++) {out}[i] = {a}[i] + {b}[i];"]

    return lines, out_t, skip_t


def _inner_join_code(grp: FusedGroup, plan: InnerJoinPlan, steps: list[Step], g: NetGraph, em: _Emitter,
                     block_type: str, block: int) -> JoinC:
    """A residual add inside the group on the block of the tensor it adds to (as ``_join_code``), then the host
    steps after it on that block (e.g. the ReLU), whose values the next stage reads. Run at every position of
    the tensor computed, recomputed halos included: that is its host work."""
    add = steps[plan.step]
    if plan.host:
        # no join of the plan: an add the model leaves to the host, its skip read from memory as the add's value is
        # laid out (a matrix product's token-major batches, or a convolution's channels), counted apart
        jn, sp = Join(add.name, None, 8 * ELEM_SIZES[g.c_type(plan.skip)], at=plan.tensor), "re-read"
        shape = g.shape(plan.skip)
        layout = None if grp.channel_axis == 1 else math.prod(shape[:-2])
    else:
        jn, sp = next((jn, sp) for jn, sp in grp.cost.inner_joins if jn.at == plan.tensor)
    comp = grp.computed(plan.tensor - 1)
    lines, out_t, skip_t = _add_lines(grp, add, plan.skip, plan.chain_first, g, block_type, comp)
    ops = [(g.c_type(steps[p].outputs[0]), steps[p]) for p in plan.after]
    for k, (t, _) in enumerate(ops):
        grp.host_work.add(comp, ELEM_SIZES[out_t if k == 0 else ops[k - 1][0]], comp, ELEM_SIZES[t])

    def epilogue(blk: str, out: str, n: str, inner: str) -> list[str]:
        code: list[str] = []
        cur = blk
        for k, (t, hs) in enumerate(ops):
            dst = out if k == len(ops) - 1 else em.temp(t, block, f"fused group block after {add.name}, op {k}")
            code += block_lines(hs, g, cur, dst, n, inner, grp.channel_axis, em.value)
            cur = dst
        return code

    if plan.host:
        return JoinC(jn, sp, skip_t, out_t, lines, epilogue if ops else None, ops[-1][0] if ops else None,
                     charged=False, skip_batch=layout)
    return JoinC(jn, sp, skip_t, out_t, lines, epilogue if ops else None, ops[-1][0] if ops else None)


def _packing_work(code: LayerCode) -> HostWork:
    """The host work of an intrinsic program's C around its calls (``codegen.intrinsic_c``): each input's
    packing loop reads one stored element and writes one packed element per packed element (the constant
    weights too: they are packed again on every inference); the output is cleared, then every packed
    element is read and scattered to the stored output. Elements in the intrinsic operand's width."""
    assert code.intrinsic is not None and code.intrinsic.program is not None
    prog = code.intrinsic.program
    w = HostWork()
    for k, lay in enumerate(prog.layouts):
        size = max(1, lay.bits // 8)
        n = math.prod(lay.packed)
        if k == 0:      # the output (layouts are output first)
            w.add(n, size, math.prod(lay.stored), size)
        else:
            w.add(n, size, n, size)
    return w


def emit_program(g: NetGraph, steps: list[Step], layers: dict[str, LayerMapping], arch: Accelerator,
                 folder: str | Path, choices: list[IntrinsicChoice] | None = None,
                 groups: list[FusedGroup] | None = None) -> Program:
    """Write the program's files into ``folder``; ``layers`` gives each accelerator step's layer mapping,
    ``choices`` the intrinsic embeddings tried (a layer's integer steps run its selected intrinsic program,
    the other steps their tile program; None: tile programs only), ``groups`` the fused groups (each runs at
    its last operator's step; the steps it covers run nowhere else)."""
    intrinsics = selected_programs(choices or [])
    t0 = time.perf_counter()
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    em = _Emitter(g)
    codes: dict[tuple[str, str], LayerCode] = {}
    step_code: dict[str, LayerCode] = {}
    host_work: dict[str, HostWork] = {}
    packing: dict[str, HostWork] = {}
    body: list[str] = []
    dumped: list[tuple[str, str, tuple[int, ...]]] = []
    groups = groups or []
    group_of = {i: grp for grp in groups for i in grp.members}
    fused_defs: list[str] = []
    fetch_files: list[str] = []
    for x in g.inputs:
        em.value(x)
    for i, s in enumerate(steps):
        grp = group_of.get(i)
        if grp is not None and i != grp.at:
            body.append(f"    /* step {i}: {s.name} ({s.op_type}) runs in fused group {grp.index} */")
            continue
        body.append(f"    /* step {i}: {s.name} ({s.op_type}) on the {s.placement}"
                    + (f"; folded: {', '.join(s.fused)}" if s.fused else "") + " */")
        body.append("    t0 = now_s();")
        if grp is not None:
            fused_defs.append(_fused_group_code(grp, steps, g, em))
            units = grp.weights.units() if grp.weights is not None else []
            units += grp.programs.units() if grp.programs is not None else []
            for fn, src in units:
                (out / f"{fn}.c").write_text(src)
                fetch_files.append(f"{fn}.c")
            # the blocks' tile programs' counters per level, by stage (``codegen.fused_blocks``)
            levels = "".join(f" print_tagged(\"fusedlvl{grp.index}\", {j}, {grp.name}_lvl{j}, "
                             f"(int)(sizeof {grp.name}_lvl{j} / sizeof(long long)));"
                             for j in (grp.programs.programs if grp.programs is not None else {}))
            ncnt = counter_count(len(grp.stages), grp.has_joins, bool(grp.host_adds))
            # one skip argument per join (inside the group by tensor, then the ending one): the value in memory
            # where it is re-read, none where it is kept on chip
            policy = {jn.at: sp for jn, sp in grp.cost.inner_joins}
            skip_arg = "".join(f"{em.value(x.skip) if x.host or policy[x.tensor] == 're-read' else '0'}, "
                               for x in grp.inner)
            skip_arg += f"{em.value(grp.skip)}, " if grp.skip is not None else ""
            lines = [f"/* fused group {grp.index}: {grp.label} (steps {', '.join(map(str, grp.members))}) */",
                     f"{{ static long long cnt[{ncnt}]; {grp.name}({em.value(grp.input)}, {skip_arg}"
                     f"{em.value(grp.output)}, cnt); print_tagged(\"fused\", {grp.index}, cnt, {ncnt});{levels} }}"]
        elif s.placement == "accelerator":
            lm = layers[s.name]
            if lm.mapping is None:
                raise SpecError(f"node {s.name!r}: layer {lm.name} has no mapping on {arch.name}: {lm.error}",
                                where=g.source)
            key = (lm.name, s.dtype)
            if key not in codes:
                fn = f"layer_{len(codes)}"
                choice = intrinsics.get(lm.name)
                if choice is not None and choice.program is not None and s.dtype == "int":
                    (out / f"{fn}.c").write_text(generate_intrinsic_c(choice.program, fn))
                    codes[key] = LayerCode(fn, lm, s.dtype, f"{fn}.c", choice,
                                           f"{choice.intrinsic} embeds ({choice.mode}: {choice.calls:,} calls at "
                                           f"{choice.utilization:.0%} utilization)")
                else:
                    src = generate_c(lm.layer.operator, arch, lm.mapping, s.dtype)
                    (out / f"{fn}.c").write_text(src.replace("int accelmap_run(", f"int {fn}(", 1))
                    if not arch.intrinsics:
                        why = f"{arch.name} has no intrinsics"
                    elif choices is None:
                        why = "intrinsics not used (tile programs only)"
                    elif s.dtype != "int":
                        why = "a float step: the intrinsic multiplies integers"
                    else:
                        why = why_not(choices, lm.name)
                    codes[key] = LayerCode(fn, lm, s.dtype, f"{fn}.c", None, why)
            step_code[s.name] = codes[key]
            host_work[s.name] = HostWork()
            lines = _accel_lines(s, i, codes[key], g, em, len(arch.levels), host_work[s.name])
            if codes[key].intrinsic is not None:
                packing[s.name] = _packing_work(codes[key])
        else:
            lines = host_lines(s, g, em.value)
        body += ["    " + ln for ln in lines]
        body.append(f'    printf("step {i} %.9f\\n", now_s() - t0);')
        for o in s.outputs:
            cid = em.value(o)
            body.append(f'    if (dump) dump_value(dump, {len(dumped)}, {cid}, sizeof {cid});')
            dumped.append((o, g.c_type(o), g.shape(o)))
    for o in g.outputs:
        em.value(o)
    main = [HOST_C]
    main += [f"int {c.function}(void **T, long long *counters);" for c in codes.values()]
    main += em.decls
    main += fused_defs
    main.append(r"""
static void print_tagged(const char *tag, int k, const long long *c, int n) {
    printf("%s %d", tag, k);
    for (int i = 0; i < n; i++) printf(" %lld", c[i]);
    printf("\n");
}

static void print_counters(int step, const long long *c, int n) { print_tagged("counters", step, c, n); }

static void dump_value(const char *dir, int k, const void *p, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%d.bin", dir, k);
    write_file(path, p, bytes);
}
""")
    main.append("int main(int argc, char **argv) {")
    main.append('    if (argc < 4) { fprintf(stderr, "usage: %s weights.bin input.bin output.bin [dump_dir]\\n", '
                "argv[0]); return 2; }")
    main.append("    const char *dump = argc > 4 ? argv[4] : 0;")
    main.append("    double t0;")
    main.append('    FILE *f = fopen(argv[1], "rb");')
    main.append('    if (!f) { fprintf(stderr, "error: cannot open %s\\n", argv[1]); return 2; }')
    for cid, _ in em.weights:
        main.append(f'    read_exact(f, {cid}, sizeof {cid}, argv[1]);')
    main.append("    fclose(f);")
    main.append('    f = fopen(argv[2], "rb");')
    main.append('    if (!f) { fprintf(stderr, "error: cannot open %s\\n", argv[2]); return 2; }')
    for x in g.inputs:
        main.append(f"    read_exact(f, {em.ids[x]}, sizeof {em.ids[x]}, argv[2]);")
    main.append("    fclose(f);")
    main += body
    main.append('    f = fopen(argv[3], "wb");')
    main.append('    if (!f) { fprintf(stderr, "error: cannot write %s\\n", argv[3]); return 2; }')
    for o in g.outputs:
        main.append(f"    fwrite({em.ids[o]}, 1, sizeof {em.ids[o]}, f);")
    main.append("    fclose(f);\n    return 0;\n}")
    (out / "main.c").write_text("\n".join(main) + "\n")
    with open(out / "weights.bin", "wb") as fh:
        for _, data in em.weights:
            fh.write(data.tobytes())
    files = " ".join(["main.c"] + [c.file for c in codes.values()] + fetch_files)
    (out / "Makefile").write_text(f"CC ?= cc\nCFLAGS ?= {' '.join(CFLAGS)}\n\nnet: {files}\n"
                                  f"\t$(CC) $(CFLAGS) -o net {files} -lm\n\nclean:\n\trm -f net\n")
    prog = Program(out, steps, step_code, dumped,
                   [(x, g.c_type(x), g.shape(x)) for x in g.inputs],
                   [(o, g.c_type(o), g.shape(o)) for o in g.outputs], host_work=host_work, packing=packing,
                   groups=groups, fetch_files=fetch_files)
    prog.generate_s = time.perf_counter() - t0
    return prog


def build_program(prog: Program, opt: str = "-O2") -> Path:
    """Compile the program with the host's C compiler (one command, optimization level ``opt``); returns the
    executable."""
    if opt not in OPT_LEVELS:
        raise SpecError(f"C optimization level {opt!r}; valid: {', '.join(OPT_LEVELS)}", where="c_opt")
    t0 = time.perf_counter()
    exe = prog.folder / "net"
    cmd = [compiler(), opt, *CFLAGS[1:], "-o", "net", *prog.source_files, "-lm"]
    proc = subprocess.run(cmd, cwd=prog.folder, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{cmd[0]} failed in {prog.folder} (files kept):\n{(proc.stderr or proc.stdout)[:2000]}")
    prog.executable = exe
    prog.build_s = time.perf_counter() - t0
    return exe
