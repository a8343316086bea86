"""What is computed: operators as affine loop nests, their constructors and text form."""

from accelmap.workload.constructors import batched_matmul, conv2d, dense, depthwise_conv2d, gemm, matmul
from accelmap.workload.operator import AffineIndex, Operand, Operator, make_operand
from accelmap.workload.text_form import parse_expression

__all__ = ["AffineIndex", "Operand", "Operator", "make_operand", "conv2d", "depthwise_conv2d",
           "dense", "gemm", "matmul", "batched_matmul", "parse_expression"]
