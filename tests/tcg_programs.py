"""Small instances of the Table 3.3 operators and random inputs for them (shared by the TCG tests)."""

import numpy as np

from accelmap.embed.tcg import THESIS_OPERATORS, parse_program
from accelmap.embed.tcg_rewrite import input_shapes

SMALL = {"gemm": dict(i=3, j=4, k=5), "fc_bias": dict(n=2, j=3, k=4), "fc_bias_sigmoid": dict(n=2, j=3, k=4),
         "attention": dict(i=3, j=2, l=4), "conv2d": dict(n=1, h=3, w=2, c=2, kh=2, kw=2, ic=2),
         "conv2d_relu": dict(n=1, h=3, w=2, c=2, kh=2, kw=2, ic=2), "capsule_routing": dict(i=3, j=2, d=2, e=2),
         "capsule_routing_sqrt": dict(i=3, j=2, d=2, e=2)}
# Operators with no solution under Table 3.1: Sabour et al.'s squash needs a square root.
NO_SOLUTION = {"capsule_routing_sqrt"}


def small_program(name):
    return parse_program(THESIS_OPERATORS[name][0], SMALL[name], name)


def random_inputs(prog, rng):
    """Random arrays for every graph input, shaped by the largest index each axis reaches."""
    return {k: rng.standard_normal(v) if v else np.array(rng.standard_normal()) for k, v in input_shapes(prog).items()}
