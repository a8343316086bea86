"""Whole networks: an ONNX model to one verified C program (accelerator tile programs + host operators)."""

from accelmap.compile.flow import CompileResult, compile_model

__all__ = ["CompileResult", "compile_model"]
