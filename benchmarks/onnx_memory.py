"""Peak memory of importing an ONNX model with embedded weights (issue 13, item 4).

Writes a ViT-B-sized model (12 blocks of QKV / projection / MLP matmuls, float32
weights embedded in the file, about 340 MiB) and imports it in fresh processes,
three ways: the whole file parsed (what the importer did before), onnx.load
without external data, and accelmap's importer. Prints the peak resident set
of each process and of a process that only imports the libraries.

    python benchmarks/onnx_memory.py [--blocks 12] [--keep FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBES = {
    "baseline (libraries only)": "",
    "whole file parsed + shape inference": (
        "m = onnx.load_from_string(open(path, 'rb').read()); "
        "onnx.shape_inference.infer_shapes(m, data_prop=True)"),
    "onnx.load(load_external_data=False)": "m = onnx.load(path, load_external_data=False)",
    "accelmap import_onnx": "m = import_onnx(path); print(m.total_macs, file=sys.stderr)",
}


def write_model(path: Path, blocks: int, d: int = 768, tokens: int = 197) -> int:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], [numpy_helper.from_array(np.array([0], np.int64), "z"),
                        numpy_helper.from_array(np.array([d], np.int64), "dq"),
                        numpy_helper.from_array(np.array([-1], np.int64), "ax")]
    x = "x"
    for b in range(blocks):
        for name, shape in (("qkv", (d, 3 * d)), ("proj", (d, d)), ("fc1", (d, 4 * d)), ("fc2", (4 * d, d))):
            inits.append(numpy_helper.from_array(rng.standard_normal(shape, dtype=np.float32), f"b{b}.{name}"))
        nodes += [helper.make_node("MatMul", [x, f"b{b}.qkv"], [f"b{b}.h"]),
                  helper.make_node("Slice", [f"b{b}.h", "z", "dq", "ax"], [f"b{b}.q"]),
                  helper.make_node("MatMul", [f"b{b}.q", f"b{b}.proj"], [f"b{b}.a"]),
                  helper.make_node("MatMul", [f"b{b}.a", f"b{b}.fc1"], [f"b{b}.f"]),
                  helper.make_node("Gelu", [f"b{b}.f"], [f"b{b}.g"]),
                  helper.make_node("MatMul", [f"b{b}.g", f"b{b}.fc2"], [f"b{b}.o"])]
        x = f"b{b}.o"
    g = helper.make_graph(nodes, "vit_like", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [tokens, d])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    path.write_bytes(model.SerializeToString())
    return blocks * tokens * (d * 3 * d + d * d + 2 * d * 4 * d)


def peak_rss_mb(code: str, path: Path) -> tuple[float, float, str]:
    # VmHWM is the peak of this process's own address space (ru_maxrss would carry the
    # parent's peak over fork and exec).
    prog = ("import sys, time, onnx\n"
            "from accelmap.workload.onnx_import import import_onnx\n"
            f"path = {str(path)!r}\n"
            "t = time.perf_counter()\n"
            f"{code}\n"
            "secs = time.perf_counter() - t\n"
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
            "print(int(hwm) / 1024, secs)\n")
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, check=True)
    rss, secs = out.stdout.split()
    return float(rss), float(secs), out.stderr.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=12)
    ap.add_argument("--keep", default=None, help="Write the model here and keep it.")
    ap.add_argument("--json", default=None, help="Also write the numbers to this file.")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.keep or Path(tmp) / "vit_like.onnx")
        macs = write_model(path, args.blocks)
        size_mb = path.stat().st_size / 2**20
        print(f"model: {path.name}, {size_mb:.0f} MiB on disk, {macs:,} MACs expected")
        rows = {}
        for label, code in PROBES.items():
            rss, secs, said = peak_rss_mb(code, path)
            rows[label] = {"peak_rss_mb": round(rss, 1), "seconds": round(secs, 2)}
            print(f"  {label:<40} peak RSS {rss:8.1f} MiB  {secs:6.2f} s" + (f"   MACs {int(said):,}" if said else ""))
        if args.json:
            Path(args.json).write_text(json.dumps({"file_mb": round(size_mb, 1), "macs": macs, "runs": rows},
                                                  indent=2) + "\n")


if __name__ == "__main__":
    main()
