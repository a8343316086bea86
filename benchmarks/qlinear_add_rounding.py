"""How onnxruntime's QLinearAdd rounds on this machine, against the compiled program's host function.

For scale ratios at and near half-way values (a_scale / y_scale and b_scale / y_scale around 1.5, 0.75,
2.5, ...) and int8 zero points 0 and random, every one of the 65,536 input pairs is added by
onnxruntime's ``com.microsoft.QLinearAdd`` and by three readings in C: the program's (``qlinear_add`` of
the compiled network's host runtime: MLAS's AVX2 formula with its fixed part's sum contracted into a fused
multiply-add), the same without that contraction, and the float reading of a QDQ Add (dequantize, add,
quantize). Prints how many values each reading gets wrong.

    python benchmarks/qlinear_add_rounding.py [--trials N]
"""

from __future__ import annotations

import argparse
import ctypes

import numpy as np

from accelmap.codegen.build import compile_shared
from accelmap.compile.host_runtime import HOST_C

PROBE = HOST_C + r"""
void program(const int8_t *a, const int8_t *b, int8_t *y, long n, float sa, int za, float sb, int zb, float sc, int zc) {
    qlinear_add(a, T_I8, b, T_I8, y, T_I8, n, sa, za, sb, zb, sc, zc, -128, 127);
}
void uncontracted(const int8_t *a, const int8_t *b, int8_t *y, long n, float sa, int za, float sb, int zb, float sc,
                  int zc) {
    const float ra = sa / sc, rb = sb / sc;
    volatile float p = ra * (float)za;      /* the products rounded apart, then added */
    const float fixed = (float)zc - (p + rb * (float)zb);
    for (long i = 0; i < n; i++) {
        long long v = (long long)nearbyintf(fmaf((float)a[i], ra, fmaf((float)b[i], rb, fixed)));
        y[i] = (int8_t)(v < -128 ? -128 : (v > 127 ? 127 : v));
    }
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=60)
    args = ap.parse_args()
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    lib = ctypes.CDLL(str(compile_shared(PROBE)))
    for f in (lib.program, lib.uncontracted):
        f.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long, ctypes.c_float, ctypes.c_int, ctypes.c_float,
                                               ctypes.c_int, ctypes.c_float, ctypes.c_int]
    vals = np.arange(-128, 128).astype(np.int8)
    a, b = np.repeat(vals, 256), np.tile(vals, 256)
    rng = np.random.default_rng(1)
    wrong = {"program": 0, "uncontracted": 0, "float reading": 0}
    for trial in range(args.trials):
        sc = np.float32(rng.uniform(0.01, 0.1))
        sa = np.float32(sc * [1.5, 0.5, 2.5, 0.25, 0.75][trial % 5] * (1 + rng.integers(-2, 3) * 1e-7))
        sb = np.float32(sc * [0.5, 1.5, 1.0, 0.75][trial % 4])
        za, zb, zc = [0, 0, 0] if trial % 2 == 0 else [int(v) for v in rng.integers(-20, 20, 3)]
        inits = [numpy_helper.from_array(np.array(v, dtype=d), n) for v, d, n in
                 [(sa, np.float32, "sa"), (za, np.int8, "za"), (sb, np.float32, "sb"), (zb, np.int8, "zb"),
                  (sc, np.float32, "sc"), (zc, np.int8, "zc")]]
        node = helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["y"],
                                domain="com.microsoft")
        g = helper.make_graph([node], "qadd", [helper.make_tensor_value_info("a", TensorProto.INT8, [a.size]),
                                               helper.make_tensor_value_info("b", TensorProto.INT8, [a.size])],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, [a.size])], initializer=inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
        so = ort.SessionOptions()
        so.log_severity_level = 3
        want = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
            None, {"a": a, "b": b})[0]
        for name, fn in (("program", lib.program), ("uncontracted", lib.uncontracted)):
            y = np.zeros_like(a)
            fn(a.ctypes.data, b.ctypes.data, y.ctypes.data, a.size, sa, za, sb, zb, sc, zc)
            wrong[name] += int((y != want).sum())
        fl = (a.astype(np.float32) - za) * sa + (b.astype(np.float32) - zb) * sb
        wrong["float reading"] += int((np.clip(np.rint(fl / sc) + zc, -128, 127).astype(np.int8) != want).sum())
    total = args.trials * a.size
    print(f"onnxruntime {ort.__version__}, {args.trials} scale sets x 65,536 int8 pairs = {total:,} values")
    for name, n in wrong.items():
        print(f"  {name:<14} {n:>9,} differ from onnxruntime's QLinearAdd")


if __name__ == "__main__":
    main()
