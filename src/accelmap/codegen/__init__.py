"""Emitted code: C for a mapped operator, compiled and run on the host, checked against NumPy."""

from accelmap.codegen.build import BuildError, compile_shared, load_run
from accelmap.codegen.c_source import generate_c
from accelmap.codegen.execute import RunReport, check_mapping
from accelmap.codegen.numpy_reference import random_inputs, reference

__all__ = ["BuildError", "compile_shared", "load_run", "generate_c", "RunReport", "check_mapping",
           "random_inputs", "reference"]
