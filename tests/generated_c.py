"""Run a mapping's generated C once: its result against NumPy's, and its access counters per (level, operand)."""

from __future__ import annotations

import numpy as np

from accelmap.codegen import compile_shared, generate_c, load_run
from accelmap.codegen.c_tensors import random_inputs, reference
from accelmap.codegen.execute import run_generated


def generated_counts(op, arch, m) -> tuple[bool, dict[tuple[int, str], tuple[int, ...]]]:
    """(the C result equals NumPy's, the C counters of every kept (level, operand))."""
    fn = load_run(compile_shared(generate_c(op, arch, m), opt="-O0"))
    tensors = random_inputs(op, "int", np.random.default_rng(0))
    got, counters = run_generated(fn, op, tensors, len(arch.levels))
    code = {(i, X.name): tuple(int(v) for v in counters[i, j]) for i in range(len(arch.levels))
            for j, X in enumerate(op.operands) if X.name in m.keep[i]}
    return bool(np.array_equal(got, reference(op, tensors))), code
