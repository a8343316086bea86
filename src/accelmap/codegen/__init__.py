"""Emitted code: C for a mapped operator, compiled and run on the host, checked against NumPy."""

from accelmap.codegen.build import BuildError, compile_shared, load_run
from accelmap.codegen.c_source import generate_c
from accelmap.codegen.c_tensors import random_inputs, reference
from accelmap.codegen.execute import RunReport, check_mapping

__all__ = ["BuildError", "compile_shared", "load_run", "generate_c", "RunReport", "check_mapping",
           "random_inputs", "reference"]
