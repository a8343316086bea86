"""Synchronization between the decoupled pipelines of one tile (PLDI 2021, Sec. 5).

The instructions of a tile, in program order, each on one queue: MTE-in copies of the staged
tensors, MTE L1->L0 loads of cube operands, one cube or vector instruction per statement, MTE-out
copies. A consumer on one queue waits for the last producer of each tensor it reads on another queue
(a set/wait flag pair). Because every queue executes in order, a wait covers all earlier
instructions of the producer queue and all later instructions of the consumer queue: a flag is
needed only when a consumer needs a producer later than the last one its queue already waited for
on that queue. ``plan_flags`` returns the flags of the direct insertion (one per cross-queue
dependence) and after this elimination, which loses no overlap. AKG groups flags with a dynamic
program that the paper does not specify; this is the no-delay part of such a grouping, not its DP.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelmap.poly.compile import Compiled, KernelPlan
from accelmap.poly.kernel import Access, Call, strip_casts


@dataclass(frozen=True)
class Instr:
    queue: str
    text: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]


def tile_program(c: Compiled, plan: KernelPlan) -> list[Instr]:
    k = c.kernel
    out: list[Instr] = []
    for t in plan.copy_in:
        out.append(Instr("MTE-in", f"copy {t} in", (), (t,)))
    order = sorted(plan.statements, key=lambda n: int(n[1:]))
    for name in order:
        st = k.statement(name)
        reads = tuple(sorted({a.tensor for a in st.reads}))
        if st.is_cube:
            body = strip_casts(st.body)
            assert isinstance(body, Call)
            ops = [strip_casts(a) for a in body.args]
            l0 = []
            for a in ops:
                assert isinstance(a, Access)
                out.append(Instr("MTE-L1L0", f"load {a.tensor} to L0", (a.tensor,), (f"{a.tensor}@L0",)))
                l0.append(f"{a.tensor}@L0")
            out.append(Instr("cube", name, tuple(l0) + ((st.out.tensor,) if st.out.tensor in reads else ()),
                             (st.out.tensor,)))
        elif st.kind == "init" and any(k.statement(o).is_cube and k.statement(o).out == st.out for o in order):
            continue   # folded into the cube's first accumulation
        else:
            out.append(Instr("vector", name, reads, (st.out.tensor,)))
    for t in plan.copy_out:
        out.append(Instr("MTE-out", f"copy {t} out", (t,), ()))
    return out


def plan_flags(program: list[Instr]) -> tuple[int, int]:
    """(flags inserted one per cross-queue dependence, flags left after eliminating covered waits)."""
    last_writer: dict[str, int] = {}
    direct = 0
    waited: dict[tuple[str, str], int] = {}
    kept = 0
    for i, ins in enumerate(program):
        need: dict[str, int] = {}
        for t in ins.reads:
            j = last_writer.get(t)
            if j is None or program[j].queue == ins.queue:
                continue
            direct += 1
            need[program[j].queue] = max(need.get(program[j].queue, -1), j)
        for q, j in need.items():
            if j > waited.get((ins.queue, q), -1):
                kept += 1
                waited[(ins.queue, q)] = j
        for t in ins.writes:
            last_writer[t] = i
    return direct, kept
