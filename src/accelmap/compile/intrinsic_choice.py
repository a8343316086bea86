"""Which way an accelerator layer runs: the accelerator's intrinsic (embedding) or the mapper's tile program.

For an accelerator with intrinsics, each distinct layer is embedded TVM-style (strict mode: NCHW,
input channels padded up to the intrinsic; Rieber's 2022 dissertation, ch. 4) and the intrinsic
program is checked against NumPy for layers up to ``CHECK_MAX_MACS``. The emitted C always runs the
mapper's tile program (``codegen`` writes tile programs; it has no C form of an intrinsic program),
so the embedding is reported beside it: whether the intrinsic covers the layer, its calls and
utilization, and its modeled latency against the mapping's.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelmap.arch.accelerator import Accelerator
from accelmap.arch.intrinsics import Intrinsic
from accelmap.embed.program import verify_program
from accelmap.embed.search import default_embedding
from accelmap.errors import AccelmapError
from accelmap.search.model_result import LayerMapping

CHECK_MAX_MACS = 2_000_000


@dataclass(frozen=True)
class IntrinsicChoice:
    layer: str
    intrinsic: str
    found: bool
    calls: int = 0
    utilization: float = 0.0
    # the embedding's modeled cycles with the loop nest it builds to rank embeddings, not a searched one
    latency: float | None = None
    mapping_latency: float = 0.0       # the mapper's modeled cycles, for comparison
    checked: bool | None = None        # intrinsic program equal to NumPy (None: not run, too large)
    reason: str = ""

    def line(self) -> str:
        if not self.found:
            return f"{self.layer}: {self.intrinsic} does not embed ({self.reason})"
        chk = {None: "not run (large layer)", True: "equal to NumPy", False: f"MISMATCH ({self.reason})"}[self.checked]
        return (f"{self.layer}: {self.intrinsic} embeds with {self.calls:,} calls at {self.utilization:.0%} "
                f"utilization, modeled {'-' if self.latency is None else f'{self.latency:,.0f}'} cycles with the loop "
                f"nest the embedding builds (the mapper's mapping: {self.mapping_latency:,.0f}); program "
                f"{chk}; the emitted C runs the mapping's tile program")


def intrinsic_choices(layers: list[LayerMapping], arch: Accelerator) -> list[IntrinsicChoice]:
    out: list[IntrinsicChoice] = []
    for name, intr in arch.intrinsics:
        if not isinstance(intr, Intrinsic):
            continue
        for lm in layers:
            op = lm.layer.operator
            try:
                e = default_embedding(op, intr, arch)
            except AccelmapError as err:
                out.append(IntrinsicChoice(lm.name, name, False, reason=str(err)))
                continue
            if e is None:
                out.append(IntrinsicChoice(lm.name, name, False, reason="no strict embedding"))
                continue
            checked, why = None, ""
            if op.macs <= CHECK_MAX_MACS:
                checked, why = verify_program(e.program)
            out.append(IntrinsicChoice(lm.name, name, True, e.program.calls, e.program.utilization, e.costs.latency,
                                       lm.cost.latency, checked, "" if checked else why))
    return out
