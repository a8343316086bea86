"""Whole models: import results, bundled models, layer tables (ONNX import is ``workload.onnx_import``)."""

from accelmap.workload.models.bundled import (
                                              BUNDLED,
                                              bundled_model_names,
                                              bundled_model_path,
                                              load_model,
                                              unknown_ops_message,
)
from accelmap.workload.models.result import HostOp, Layer, ModelImport, group_layers

__all__ = ["HostOp", "Layer", "ModelImport", "group_layers", "BUNDLED", "bundled_model_names",
           "bundled_model_path", "load_model", "unknown_ops_message"]
