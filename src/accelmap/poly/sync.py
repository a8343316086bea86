"""Synchronization between the decoupled pipelines of one tile (PLDI 2021, Sec. 5).

The instructions of a tile, in program order, each on one queue: MTE-in copies of the staged
tensors, MTE L1->L0 loads of cube operands, one cube or vector instruction per statement, MTE-out
copies. A consumer on one queue waits for the last producer of each tensor it reads on another queue
(a set/wait flag pair). Because every queue executes in order, a wait covers all earlier
instructions of the producer queue and all later instructions of the consumer queue: a flag is
needed only when a consumer needs a producer later than the last one its queue already waited for
on that queue. ``plan_flags`` returns the flags of the direct insertion (one per cross-queue
dependence) and after this elimination, which loses no overlap.

``group_flags`` then groups flags by dynamic programming (Sec. 5: AKG inserts syncs per dependence and
groups them with a DP it does not specify; this is our formulation). Per pair of queues, the
dependences left after the elimination form a chain whose producers and consumers both increase,
and one flag (set after producer s, wait before consumer w) covers exactly a contiguous run of it.
Covering the run a..b with one flag costs ``flag_cost`` plus the delay it adds: the run's first
consumer now waits for the run's last producer, i.e. for the producer queue's work between the
two. A run is allowed only if its last producer comes before its first consumer in program order
(so no wait can deadlock the in-order queues). The DP over run ends is exact for this cost; a test
checks it against brute force over all partitions of the dependences into groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from accelmap.poly.kernel import Access, Call, strip_casts

if TYPE_CHECKING:   # compile.py costs its fusion choices with the timing model, which uses this module
    from accelmap.poly.compile import Compiled, KernelPlan


@dataclass(frozen=True)
class Instr:
    queue: str
    text: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    loop: str = ""   # the cube statement whose reduction-chunk loop runs this instruction once per chunk in the code


def tile_program(c: Compiled, plan: KernelPlan) -> list[Instr]:
    k = c.kernel
    out: list[Instr] = []
    for t in plan.copy_in:
        out.append(Instr("MTE-in", f"copy {t} in", (), (t,)))
    order = sorted(plan.statements, key=lambda n: int(n[1:]))
    layout = k.layout_statements()
    for name in order:
        st = k.statement(name)
        reads = tuple(sorted({a.tensor for a in st.reads}))
        if st.is_cube:
            body = strip_casts(st.body)
            assert isinstance(body, Call)
            ops = [strip_casts(a) for a in body.args]
            l0 = []
            loop = name if name in plan.l0_chunks else ""
            for a in ops:
                assert isinstance(a, Access)
                out.append(Instr("MTE-L1L0", f"load {a.tensor} to L0", (a.tensor,), (f"{a.tensor}@L0",), loop))
                l0.append(f"{a.tensor}@L0")
            out.append(Instr("cube", name, tuple(l0) + ((st.out.tensor,) if st.out.tensor in reads else ()),
                             (st.out.tensor,), loop))
        elif st.kind == "init" and any(k.statement(o).is_cube and k.statement(o).out == st.out for o in order):
            continue   # folded into the cube's first accumulation
        elif name in layout:
            out.append(Instr("MTE-L1L0", name, reads, (st.out.tensor,)))   # img2col by the MTE
        else:
            out.append(Instr("vector", name, reads, (st.out.tensor,)))
    for t in plan.copy_out:
        out.append(Instr("MTE-out", f"copy {t} out", (t,), ()))
    return out


def issues_per_tile(program: list[Instr], f: Flag, chunks: dict[str, int]) -> int:
    """How often a tile issues flag ``f``: once, or once per reduction chunk when both of its instructions run
    in the same L0 chunk loop (an L1 -> L0 load and the cube statement it feeds; ``chunks``:
    ``KernelPlan.l0_chunks``)."""
    loop = program[f.set_after].loop
    return chunks.get(loop, 1) if loop and loop == program[f.wait_before].loop else 1


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


@dataclass(frozen=True)
class Flag:
    """A set/wait pair: ``consumer`` waits before instruction ``wait_before`` until ``producer`` has run
    instruction ``set_after`` (indices into the tile program)."""

    producer: str
    consumer: str
    set_after: int
    wait_before: int


def dependences(program: list[Instr]) -> list[tuple[int, int]]:
    """Cross-queue dependences (producer index, consumer index): each read on the last writer of its tensor."""
    last_writer: dict[str, int] = {}
    out: list[tuple[int, int]] = []
    for i, ins in enumerate(program):
        for t in ins.reads:
            j = last_writer.get(t)
            if j is not None and program[j].queue != ins.queue and (j, i) not in out:
                out.append((j, i))
        for t in ins.writes:
            last_writer[t] = i
    return out


def _chain(deps: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The dependences of one queue pair that no other one covers at no delay, by increasing consumer."""
    keep = [d for d in deps if not any(e != d and e[0] >= d[0] and e[1] <= d[1] for e in deps)]
    return sorted(set(keep), key=lambda d: d[1])


def producer_work(program: list[Instr], weights: Sequence[float], queue: str, after: int, upto: int) -> float:
    """Work of ``queue`` on instructions after ``after`` up to ``upto`` (the delay of waiting for ``upto``)."""
    return sum(weights[k] for k in range(after + 1, upto + 1) if program[k].queue == queue)


def group_flags(program: list[Instr], weights: Sequence[float], flag_cost: float) -> tuple[list[Flag], float]:
    """The flags of the cheapest grouping, and its cost (``flag_cost`` per flag plus the delays)."""
    pairs: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for j, i in dependences(program):
        pairs.setdefault((program[j].queue, program[i].queue), []).append((j, i))
    flags: list[Flag] = []
    total = 0.0
    for (pq, cq), deps in pairs.items():
        chain = _chain(deps)
        n = len(chain)
        best: list[float] = [0.0] + [float("inf")] * n
        back = [0] * (n + 1)
        for b in range(1, n + 1):
            for a in range(b, 0, -1):
                if chain[b - 1][0] >= chain[a - 1][1]:
                    break   # the run's last producer would come after its first consumer
                cost = best[a - 1] + flag_cost + producer_work(program, weights, pq, chain[a - 1][0], chain[b - 1][0])
                if cost < best[b]:
                    best[b], back[b] = cost, a
        total += best[n]
        b = n
        while b:
            a = back[b]
            flags.append(Flag(pq, cq, chain[b - 1][0], chain[a - 1][1]))
            b = a - 1
    return sorted(flags, key=lambda f: (f.wait_before, f.set_after)), total
