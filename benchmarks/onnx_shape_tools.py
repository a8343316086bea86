"""Which tool resolves shapes computed by shape arithmetic: ONNX data propagation, onnx-simplifier, ours.

The cases are the shape-arithmetic patterns real exports fail on (the importer tests build them with
onnx.helper): a GPT-2-like block whose head_dim is Shape(x)[2] / heads through Div and a float
round trip (Cast), and a Swin/ShuffleNet-like graph whose Pad amounts come from Mod/Sub of a
Shape and whose chunk is a Slice at Shape / 2. Each graph gets its symbolic input dims fixed to
numbers and its weights filled with zeros (onnx-simplifier folds constants by running them), then:

- ONNX: ``onnx.shape_inference.infer_shapes(model, data_prop=True)``;
- onnx-simplifier: ``onnxsim.simplify(model)`` (constant folding with onnxruntime), then ONNX shape
  inference; measured when ``onnxsim`` is installed (``pip install onnxsim``), else reported as such;
- ours: ``accelmap.workload.onnx_import.import_onnx``.

A MAC node (MatMul, Conv) counts as resolved when its output shape is fully known.

    python benchmarks/onnx_shape_tools.py

Prints a table and writes benchmarks/results/onnx_shape_tools.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "onnx_shape_tools.json"
sys.path.insert(0, str(HERE.parent / "tests"))
MAC_OPS = ("MatMul", "Conv")


def cases() -> list[tuple[str, onnx.ModelProto, dict[str, int], dict[str, int]]]:
    """(name, model, symbolic dims, rank of each graph output)."""
    from test_onnx_shapes import attention_block, window_and_chunk

    return [("head_dim via Div/Cast (dynamic sequence)", attention_block(), {"batch": 2, "sequence": 13}, {"y": 3}),
            ("Pad via Mod/Sub, chunk via Slice", window_and_chunk(), {"height": 13, "width": 13},
             {"y": 4, "win_out": 4})]


def concrete(model: onnx.ModelProto, dims: dict[str, int], ranks: dict[str, int]) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    # Exporters declare each output's rank (its sizes may be symbolic); onnx-simplifier needs it.
    for vi in m.graph.output:
        shape = vi.type.tensor_type.shape
        if not shape.dim:
            for i in range(ranks[vi.name]):
                shape.dim.add().dim_param = f"{vi.name}_{i}"
    for vi in m.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param:
                d.dim_value = dims[d.dim_param]
    for i, t in enumerate(m.graph.initializer):
        if not t.raw_data and not t.int64_data and not t.float_data:
            arr = np.zeros(list(t.dims), dtype=onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(arr, t.name))
    return m


def resolved(model: onnx.ModelProto) -> tuple[int, int]:
    known = {}
    for vi in list(model.graph.value_info) + list(model.graph.output):
        shape = vi.type.tensor_type.shape
        known[vi.name] = bool(shape.dim) and all(d.HasField("dim_value") for d in shape.dim)
    macs = [n for n in model.graph.node if n.op_type in MAC_OPS]
    return sum(1 for n in macs if known.get(n.output[0], False)), len(macs)


def main() -> None:
    from accelmap.workload.onnx_import import import_onnx

    try:
        import onnxsim
    except ImportError:
        onnxsim = None
    rows = []
    for name, model, dims, ranks in cases():
        m = concrete(model, dims, ranks)
        n_mac = sum(1 for n in m.graph.node if n.op_type in MAC_OPS)
        row = {"case": name, "mac_nodes": n_mac}
        t = time.perf_counter()
        got, _ = resolved(shape_inference.infer_shapes(m, data_prop=True))
        row["onnx_data_prop"] = {"resolved": got, "seconds": time.perf_counter() - t}
        if onnxsim is None:
            row["onnxsim"] = None
        else:
            t = time.perf_counter()
            try:
                simple, ok = onnxsim.simplify(m)
                got, total = resolved(shape_inference.infer_shapes(simple, data_prop=True))
                row["onnxsim"] = {"resolved": got, "mac_nodes_after": total, "check": bool(ok),
                                  "seconds": time.perf_counter() - t}
            except Exception as e:      # the tool's own failure is a result here
                row["onnxsim"] = {"error": f"{type(e).__name__}: {str(e)[:120]}"}
        t = time.perf_counter()
        imp = import_onnx(model, dims=dims)
        row["ours"] = {"resolved": sum(l.count for l in imp.layers), "macs": imp.total_macs,
                       "seconds": time.perf_counter() - t}
        rows.append(row)
    print(f"{'case':<42} {'MAC nodes':>9} {'ONNX data_prop':>14} {'onnx-simplifier':>16} {'ours':>5}")
    for r in rows:
        s = r["onnxsim"]
        simp = "not installed" if s is None else ("failed" if "error" in s else
                                                  f"{s['resolved']} of {s['mac_nodes_after']}")
        print(f"{r['case']:<42} {r['mac_nodes']:>9} {r['onnx_data_prop']['resolved']:>14} {simp:>16} "
              f"{r['ours']['resolved']:>5}")
    print("resolved: MAC nodes whose output shape is fully known (ours: every MAC node became an operator)")
    for r in rows:
        if r["onnxsim"] and "error" in r["onnxsim"]:
            print(f"onnx-simplifier on '{r['case']}': {r['onnxsim']['error']}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"onnx": onnx.__version__,
                                   "onnxsim": getattr(onnxsim, "__version__", None), "cases": rows}, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
