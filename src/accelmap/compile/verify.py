"""Run the compiled network and compare it with onnxruntime on the same ONNX file.

int8 QDQ outputs (integer tensors) must be equal bit for bit. Float outputs must agree within
``FLOAT_RTOL`` of the reference's largest magnitude: the tile programs sum in the order of their
mapping, onnxruntime in the order of its kernels, and exp/erf come from different libraries, so
float results differ in the last bits. On a mismatch every step's output is compared with
onnxruntime's value of the same name, and the first step that differs is named.
"""

from __future__ import annotations

import functools
import importlib
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import onnx

from accelmap.compile.graph import NetGraph
from accelmap.compile.integer_form import integer_form
from accelmap.compile.program import NP_OF_C, Program
from accelmap.errors import AccelmapError

# Float outputs: |program - onnxruntime| <= FLOAT_RTOL * max|onnxruntime| + FLOAT_ATOL, element-wise.
FLOAT_RTOL = 1e-4
FLOAT_ATOL = 1e-6


@dataclass
class RunOutput:
    outputs: dict[str, np.ndarray]
    step_seconds: list[float]
    counters: dict[int, np.ndarray]          # step index -> the layer's transfer counters
    wall_s: float
    dumped: dict[str, np.ndarray] = field(default_factory=dict)
    # fused group index -> input fetched, output written, invalid reads, MACs per stage (, skip fetched), weight
    # bits fetched per stage
    fused_counters: dict[int, np.ndarray] = field(default_factory=dict)
    # (fused group index, stage) -> its blocks' tile programs' counters per level, flat ([levels][operands][4])
    fused_level_counters: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)


@dataclass
class Comparison:
    name: str
    exact: bool            # compared bit for bit (integer tensors)
    ok: bool
    max_abs_diff: float
    max_ref: float
    mismatched: int        # elements out of tolerance
    size: int

    def line(self) -> str:
        how = "bit-exact" if self.exact else f"tolerance {FLOAT_RTOL:g} x max|ref|"
        verdict = "match" if self.ok else f"MISMATCH ({self.mismatched:,} of {self.size:,} elements)"
        return f"{self.name}: {verdict} [{how}], max |diff| {self.max_abs_diff:.3g}, max |ref| {self.max_ref:.3g}"


@dataclass
class Verification:
    reference: str
    outputs: list[Comparison]
    first_bad_step: str | None = None         # the first step whose output differs (on a mismatch)
    first_bad_value: Comparison | None = None
    reference_s: float = 0.0
    quantized: list[Comparison] = field(default_factory=list)   # every integer step output, bit for bit
    # a QDQ model: its outputs against onnxruntime on the file as written (``outputs``: the integer form)
    file_outputs: list[Comparison] = field(default_factory=list)
    file_first_bad: str | None = None
    file_note: str | None = None              # why the file's run is not the exact integer computation here
    # the file as written run with onnxruntime's int8 QDQ kernels (session.qdqisint8allowed=1): its outputs and
    # every quantized value, bit for bit
    file_int8_outputs: list[Comparison] = field(default_factory=list)
    file_int8_quantized: list[Comparison] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.outputs) and all(c.ok for c in self.quantized)

    def summary(self) -> str:
        lines = [f"verification against {self.reference}: {'PASS' if self.ok else 'FAIL'}"]
        lines += ["  " + c.line() for c in self.outputs]
        if self.quantized:
            bad = [c for c in self.quantized if not c.ok]
            lines.append(f"  quantized (integer) values of every step: {len(self.quantized) - len(bad)} of "
                         f"{len(self.quantized)} bit-exact" + (f"; first differing: {bad[0].line()}" if bad else ""))
        for c in self.file_outputs:
            lines.append(f"  the file as written (onnxruntime's own mix of integer and float kernels): {c.line()}")
        if self.file_first_bad:
            lines.append(f"    first step that differs from it: {self.file_first_bad}")
        if self.file_note:
            lines.append(f"    note: {self.file_note}")
        if self.file_int8_outputs:
            bad = [c for c in self.file_int8_outputs + self.file_int8_quantized if not c.ok]
            lines.append(f"  the file as written, onnxruntime with {INT8_QDQ_ENTRY}=1 (its int8 QDQ kernels): outputs "
                         f"{'match' if all(c.ok for c in self.file_int8_outputs) else 'differ'}; quantized values "
                         f"{sum(c.ok for c in self.file_int8_quantized)} of {len(self.file_int8_quantized)} bit-exact"
                         + (f"; first differing: {bad[0].line()}" if bad else ""))
        if self.first_bad_step:
            lines.append(f"  first step that differs: {self.first_bad_step}"
                         + (f" ({self.first_bad_value.line()})" if self.first_bad_value else ""))
        return "\n".join(lines)


def random_inputs(g: NetGraph, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard normal inputs (float) or uniform over the type's range (integers), seeded."""
    rng = np.random.default_rng(seed)
    out = {}
    for x in g.inputs:
        t = g.np_type(x)
        if t == np.float32:
            out[x] = rng.standard_normal(g.shape(x)).astype(np.float32)
        else:
            info = np.iinfo(t)
            out[x] = rng.integers(info.min, info.max, size=g.shape(x), endpoint=True).astype(t)
    return out


def run_program(prog: Program, inputs: dict[str, np.ndarray], dump: bool = False) -> RunOutput:
    if prog.executable is None:
        raise AccelmapError("the program is not built")
    with tempfile.TemporaryDirectory(prefix="accelmap-run-") as td:
        tdp = Path(td)
        with open(tdp / "input.bin", "wb") as f:
            for name, ct, shape in prog.inputs:
                f.write(np.ascontiguousarray(inputs[name], dtype=NP_OF_C[ct]).reshape(shape).tobytes())
        cmd = [str(prog.executable), str(prog.folder / "weights.bin"), str(tdp / "input.bin"), str(tdp / "out.bin")]
        if dump:
            (tdp / "dump").mkdir()
            cmd.append(str(tdp / "dump"))
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise AccelmapError(f"{prog.executable} failed (exit {proc.returncode}): {proc.stderr.strip()[:500]}")
        raw = (tdp / "out.bin").read_bytes()
        outputs, at = {}, 0
        for name, ct, shape in prog.outputs:
            n = int(np.prod(shape, dtype=np.int64)) * np.dtype(NP_OF_C[ct]).itemsize
            outputs[name] = np.frombuffer(raw[at:at + n], dtype=NP_OF_C[ct]).reshape(shape).copy()
            at += n
        dumped = {}
        if dump:
            for k, (name, ct, shape) in enumerate(prog.values):
                dumped[name] = np.fromfile(tdp / "dump" / f"{k}.bin", dtype=NP_OF_C[ct]).reshape(shape)
    secs: list[float] = [0.0] * len(prog.steps)
    counters: dict[int, np.ndarray] = {}
    fused: dict[int, np.ndarray] = {}
    levels: dict[tuple[int, int], np.ndarray] = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == "step":
            secs[int(parts[1])] = float(parts[2])
        elif parts and parts[0] in ("counters", "fused"):
            (counters if parts[0] == "counters" else fused)[int(parts[1])] = np.array([int(v) for v in parts[2:]],
                                                                                      dtype=np.int64)
        elif parts and parts[0].startswith("fusedlvl"):
            levels[(int(parts[0][len("fusedlvl"):]), int(parts[1]))] = np.array([int(v) for v in parts[2:]],
                                                                                  dtype=np.int64)
    return RunOutput(outputs, secs, counters, wall, dumped, fused, levels)


def _onnxruntime() -> Any:
    try:
        # imported by name: onnxruntime ships no type information
        return importlib.import_module("onnxruntime")
    except ImportError:
        raise AccelmapError("verification needs onnxruntime (pip install 'accelmap[compile]' or "
                            "pip install onnxruntime); pass --no-verify to skip it") from None


def run_onnxruntime(source: onnx.ModelProto, g: NetGraph, inputs: dict[str, np.ndarray],
                    extra: Sequence[str] = (), config: dict[str, str] | None = None,
                    optimized: Path | None = None) -> dict[str, np.ndarray]:
    """onnxruntime's outputs of ``source`` (CPU; default session options plus the session ``config`` entries) and
    the values named in ``extra``; ``optimized`` gets the graph onnxruntime runs (after its fusions)."""
    ort = _onnxruntime()
    model = onnx.ModelProto()
    model.CopyFrom(source)
    have = {o.name for o in model.graph.output}
    for name in extra:
        if name not in have:
            vi = onnx.helper.make_tensor_value_info(name, g.types.get(name, onnx.TensorProto.FLOAT), None)
            model.graph.output.append(vi)
            have.add(name)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    for k, v in (config or {}).items():
        so.add_session_config_entry(k, v)
    if optimized is not None:
        so.optimized_model_filepath = str(optimized)
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    res = sess.run(names, {k: v for k, v in inputs.items()})
    return dict(zip(names, res, strict=True))


# onnxruntime's session entry that lets its QDQ transformer fuse int8-activation groups into its int8 kernels
# (QLinearConv, QLinearMatMul, ...); by default on x86 it leaves a Conv with int8 activations in float.
INT8_QDQ_ENTRY = "session.qdqisint8allowed"
FLOAT_PRODUCT_OPS = ("Conv", "MatMul", "Gemm", "ConvTranspose", "Einsum")
INTEGER_PRODUCT_OPS = ("QLinearConv", "QLinearMatMul", "QGemm", "ConvInteger", "MatMulInteger", "DynamicQuantizeMatMul")


def product_kernels(optimized: Path) -> tuple[int, int]:
    """How many matrix products onnxruntime ran in float (Conv, MatMul, ... of the default domain) and with an
    integer kernel, in the graph it ran (after its fusions)."""
    nodes = onnx.load(str(optimized)).graph.node
    return (sum(n.op_type in FLOAT_PRODUCT_OPS and n.domain in ("", "ai.onnx") for n in nodes),
            sum(n.op_type in INTEGER_PRODUCT_OPS for n in nodes))


U8S8_SATURATION_NOTE = (
    "onnxruntime's uint8 x int8 integer GEMM on this CPU adds each pair of products in saturating int16 "
    "(x86 without VNNI: vpmaddubsw; measured 255 x 127 + 255 x 127 = 32767, not 64770), and on x86 it runs "
    "int8 QDQ activations as uint8, so its run of the file is not the exact integer computation wherever a "
    "pair exceeds 32767; 7-bit weights (quantize_static reduce_range=True) never do")


@functools.cache
def onnxruntime_u8s8_saturates() -> bool:
    """Whether the installed onnxruntime, on this CPU, saturates uint8 x int8 products pairwise in int16.

    Measured, not inferred from CPU flags: a MatMulInteger of [255, 255] by [127, 127] is 64770 exactly;
    MLAS's AVX2 kernel without VNNI (vpmaddubsw) returns 32767. A known onnxruntime limitation (its
    quantization guide recommends reduce_range or VNNI hardware); its integer form (int8 x int8) is exact.
    """
    ort = _onnxruntime()
    h = onnx.helper
    w = onnx.numpy_helper.from_array(np.full((2, 1), 127, dtype=np.int8), "w")
    graph = h.make_graph([h.make_node("MatMulInteger", ["a", "w"], ["y"])], "u8s8_probe",
                         [h.make_tensor_value_info("a", onnx.TensorProto.UINT8, [1, 2])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.INT32, [1, 1])], initializer=[w])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    got = int(sess.run(None, {"a": np.full((1, 2), 255, dtype=np.uint8)})[0].item())
    return got != 255 * 127 * 2


def compare(name: str, got: np.ndarray, want: np.ndarray) -> Comparison:
    exact = not np.issubdtype(want.dtype, np.floating)
    if got.shape != want.shape:
        got = got.reshape(want.shape) if got.size == want.size else got
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64)) if got.shape == want.shape else None
    max_ref = float(np.abs(want.astype(np.float64)).max(initial=0.0))
    if diff is None:
        return Comparison(name, exact, False, float("inf"), max_ref, want.size, want.size)
    if exact:
        bad = diff != 0
    else:
        bad = ~(diff <= FLOAT_RTOL * max_ref + FLOAT_ATOL)
    return Comparison(name, exact, not bool(bad.any()), float(diff.max(initial=0.0)), max_ref, int(bad.sum()),
                      want.size)


def _first_bad(prog: Program, dumped: dict[str, np.ndarray], ref: dict[str, np.ndarray]
               ) -> tuple[str, Comparison] | None:
    for s in prog.steps:
        for o in s.outputs:
            if o in ref and o in dumped:
                c = compare(o, dumped[o], ref[o])
                if not c.ok:
                    return f"{s.name} ({s.op_type}, {s.placement})", c
    return None


def verify(prog: Program, g: NetGraph, inputs: dict[str, np.ndarray], run: RunOutput | None = None) -> Verification:
    """Compare the program with onnxruntime; on a mismatch, find the first step that differs.

    A float model: its outputs within tolerance of onnxruntime's on the file. A model with integer
    products (QDQ): every quantized value bit for bit against onnxruntime on the model's integer form
    (``integer_form``); the comparison with the file as written is reported too.
    """
    ort = _onnxruntime()
    t0 = time.perf_counter()
    ref = run_onnxruntime(g.model, g, inputs)
    ref_s = time.perf_counter() - t0
    run = run or run_program(prog, inputs)
    outs = [compare(o, run.outputs[o], ref[o]) for o in g.outputs]
    where = f"onnxruntime {ort.__version__} (CPU, default session options)"
    v = Verification(where, outs, reference_s=ref_s)
    ints = [name for name, ct, _ in prog.values if ct != "float"]
    intf = integer_form(g, prog.steps)
    dumped: dict[str, np.ndarray] = {}
    if run.dumped:
        dumped = run.dumped
    elif intf is not None or ints or not v.ok:
        dumped = run_program(prog, inputs, dump=True).dumped
    if intf is not None:
        # Every quantized value of the steps is an output of the reference, whether the program dumps it or not (a
        # fused group's intermediates it does not): onnxruntime fuses nodes across no graph output, so asking for
        # fewer values lets it fuse more float operators around the integer ones (another rounding), and the
        # reference of a fused program would differ from the unfused one's.
        every = ints + [o for s in prog.steps for o in s.outputs
                        if o not in ints and o in g.types and g.c_type(o) != "float"]
        ref_i = run_onnxruntime(intf, g, inputs, every)
        v.file_outputs, v.outputs = v.outputs, [compare(o, run.outputs[o], ref_i[o]) for o in g.outputs]
        v.reference = where + (", on the integer form (QLinearConv / QLinearMatMul / QGemm for each integer product, "
                               "QLinearSoftmax / QLinearGlobalAveragePool / QLinearAdd for each quantized softmax, global pool "
                               "and add)")
        v.quantized = [compare(n, dumped[n], ref_i[n]) for n in ints if n in ref_i]
        if not v.ok:
            bad = _first_bad(prog, dumped, ref_i)
        elif not all(c.ok for c in v.file_outputs):
            with tempfile.TemporaryDirectory(prefix="accelmap-ort-") as td:
                opt = Path(td) / "optimized.onnx"
                bad = _first_bad(prog, dumped, run_onnxruntime(g.model, g, inputs, ints, optimized=opt))
                n_float, n_int = product_kernels(opt)
            if bad:
                v.file_first_bad = f"{bad[0]}: {bad[1].line()}"
            notes = []
            if n_float:
                notes.append(f"onnxruntime ran {n_float} of the file's matrix products in float (with default session "
                             f"options its QDQ transformer leaves int8-activation groups it does not fuse in float; "
                             f"{INT8_QDQ_ENTRY}=1 fuses them into its int8 kernels), where the program multiplies "
                             f"integers; a float sum at a rounding tie can land on either side")
            if n_int and onnxruntime_u8s8_saturates():
                notes.append(U8S8_SATURATION_NOTE)
            v.file_note = "; ".join(notes) or None
            bad = None
        else:
            bad = None
        # the file with onnxruntime's int8 kernels: the same integer computation, fused by onnxruntime itself
        ref_8 = run_onnxruntime(g.model, g, inputs, ints, config={INT8_QDQ_ENTRY: "1"})
        v.file_int8_outputs = [compare(o, run.outputs[o], ref_8[o]) for o in g.outputs]
        v.file_int8_quantized = [compare(n, dumped[n], ref_8[n]) for n in ints if n in ref_8]
    else:
        if ints:
            ref_q = run_onnxruntime(g.model, g, inputs, ints)
            v.quantized = [compare(n, dumped[n], ref_q[n]) for n in ints if n in ref_q]
        bad = None if v.ok else _first_bad(prog, dumped,
                                           run_onnxruntime(g.model, g, inputs, [n for n, _, _ in prog.values]))
    if bad:
        v.first_bad_step, v.first_bad_value = bad
    return v
