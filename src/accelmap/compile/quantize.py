"""An int8 QDQ model of a float model, made with onnxruntime's quantization tools.

Static quantization calibrated on random inputs (standard normal, seeded): int8 activations and
weights, both symmetric (zero point 0, so padding stays zero on the accelerator), per-channel
weights, QDQ format. Used to make quantized test and benchmark models from weight-free graphs.
"""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import numpy as np
import onnx

from accelmap.compile.graph import NetGraph
from accelmap.errors import AccelmapError


def quantize_qdq(g: NetGraph, seed: int = 0, samples: int = 4, symmetric_activations: bool = True,
                 reduce_range: bool = False) -> onnx.ModelProto:
    """``symmetric_activations`` False: activations get zero points (onnxruntime's default).

    ``reduce_range``: 7-bit weights (-64..63), onnxruntime's remedy for x86 CPUs without VNNI, whose u8s8
    kernel adds each pair of uint8 x int8 products in saturating int16 (255 x 64 x 2 = 32640 fits, 255 x
    127 x 2 does not); with it onnxruntime's run of the file is the exact integer computation on any CPU.
    """
    try:
        q = importlib.import_module("onnxruntime.quantization")
    except ImportError:
        raise AccelmapError("quantizing needs onnxruntime (pip install onnxruntime)") from None
    rng = np.random.default_rng(seed)
    data = [{x: rng.standard_normal(g.shape(x)).astype(np.float32) for x in g.inputs} for _ in range(samples)]

    it = iter(data)
    # onnxruntime reads calibration data through a CalibrationDataReader subclass
    reader = type("Reader", (q.CalibrationDataReader,), {"get_next": lambda self: next(it, None)})()

    model = onnx.ModelProto()
    model.CopyFrom(g.model)
    for vi in model.graph.input:           # the bound shapes (quantization tools want static ones)
        if vi.name in g.shapes:
            for d, v in zip(vi.type.tensor_type.shape.dim, g.shape(vi.name), strict=True):
                d.Clear()
                d.dim_value = v
    with tempfile.TemporaryDirectory(prefix="accelmap-quantize-") as td:
        src, dst = Path(td) / "float.onnx", Path(td) / "qdq.onnx"
        onnx.save(model, src)
        q.quantize_static(str(src), str(dst), reader, quant_format=q.QuantFormat.QDQ,
                          activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8, per_channel=True, reduce_range=reduce_range,
                          extra_options={"ActivationSymmetric": symmetric_activations, "WeightSymmetric": True})
        return onnx.load(dst)
