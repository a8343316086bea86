"""accelmap: map DNN operators onto hardware accelerators.

The entry points a script needs are importable from here (the CLI is a thin layer over them)::

    import accelmap
    arch = accelmap.get_accelerator("tpu_like")
    op = accelmap.adopt_precision(accelmap.gemm("q", m=128, n=768, k=768), arch)
    res = accelmap.map_operator(op, arch, "edp")
    print(res.best.mapping, res.best.result.energy_total, res.gap)

They load on first use, so ``import accelmap`` stays cheap.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

__version__ = "0.1.0"

# The search logs its decisions (``accelmap map -v``); a library stays silent unless its user asks.
logging.getLogger("accelmap").addHandler(logging.NullHandler())

# name -> module that defines it
_API = {
    # what is computed
    "load_model": "accelmap.workload.models",
    "load_workload": "accelmap.workload.files",
    "parse_expression": "accelmap.workload.text_form",
    "conv2d": "accelmap.workload.constructors",
    "depthwise_conv2d": "accelmap.workload.constructors",
    "dense": "accelmap.workload.constructors",
    "gemm": "accelmap.workload.constructors",
    "batched_matmul": "accelmap.workload.constructors",
    # what computes it
    "get_accelerator": "accelmap.arch.presets",
    "load_accelerator": "accelmap.arch.schema",
    "load_zigzag_accelerator": "accelmap.arch.zigzag_import",
    "adopt_precision": "accelmap.arch.accelerator",
    # how, and how much
    "Mapping": "accelmap.mapping.loopnest",
    "Loop": "accelmap.mapping.loopnest",
    "mapping_from_yaml": "accelmap.mapping.forms",
    "mapping_to_yaml": "accelmap.mapping.forms",
    "parse_text": "accelmap.mapping.forms",
    "evaluate": "accelmap.cost.model",
    # which mapping
    "Constraints": "accelmap.search.space",
    "HeuristicConfig": "accelmap.search.heuristic_config",
    "map_operator": "accelmap.search.mapper",
    "map_model": "accelmap.search.model_mapper",
    "write_report": "accelmap.report.model_report",
    # running it
    "simulate": "accelmap.sim.simulate",
    "generate_c": "accelmap.codegen.c_source",
    "check_mapping": "accelmap.codegen.execute",
    "embed": "accelmap.embed.search",
    "get_intrinsic": "accelmap.arch.intrinsics",
    "compile_model": "accelmap.compile.flow",
    # tuning by measurement
    "tune_operator": "accelmap.tune.session",
    "ScheduleTemplate": "accelmap.tune.template",
}

__all__ = sorted(_API) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'accelmap' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
