"""Top-down embedding of one intrinsic into one of our operators (Rieber's 2022 dissertation, ch. 3).

The chapter 3 method behind ``accelmap embed --method topdown``: the operator becomes a TCG, the
intrinsic a TCG pattern, and the rewrite search of Table 3.4 (configuration 4, input transposes)
looks for candidate graphs the intrinsic covers completely. Each solution is reported like a
dataflow embedding: the calls it makes (outer loops times tiles, eq. 3.5/3.6 with the intrinsic's
own sizes), the MAC utilization, the layout changes (transposed inputs, reordered results) and the
loop program, and it can be run with NumPy emulations of the intrinsic against the operator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accelmap.arch.intrinsics import Intrinsic
from accelmap.embed.tcg import Program, evaluate, program_from_operator
from accelmap.embed.tcg_execute import run_selection
from accelmap.embed.tcg_match import Instruction, intrinsic_instruction
from accelmap.embed.tcg_rewrite import Candidate, SearchResult, _all_loads, input_shapes, search
from accelmap.embed.tcg_tiling import InstructionCalls, instruction_calls
from accelmap.workload.operator import Operator


@dataclass(frozen=True)
class Call:
    """One statement's instruction: the loops around it and how its dimensions tile the workload's."""

    statement: str
    issued: InstructionCalls

    @property
    def count(self) -> int:
        return self.issued.calls

    @property
    def cycles(self) -> int:
        return self.issued.cycles

    def text(self) -> list[str]:
        lines = [f"# {self.statement}"]
        indent = ""
        for d, n in self.issued.loops:
            lines.append(f"{indent}for {d} in range({n}):")
            indent += "  "
        for t in self.issued.dims:
            if t.calls > 1:
                lines.append(f"{indent}for {t.dim}_tile in range({t.calls}):")
                indent += "  "
        covered = ", ".join(f"{t.instruction_dim}<-{t.dim}" + (f" pad {t.padding}" if t.padding else "")
                            for t in self.issued.dims)
        lines.append(f"{indent}{self.issued.instruction}({covered})")
        return lines


@dataclass(frozen=True)
class TopDownEmbedding:
    candidate: Candidate
    calls: tuple[Call, ...]
    utilization: float          # operator MACs over the MACs of all calls
    layouts: tuple[str, ...]    # transposed inputs and reordered results

    @property
    def call_count(self) -> int:
        return sum(c.count for c in self.calls)

    @property
    def cycles(self) -> int:
        """Issue cycles: calls times the intrinsic's issue interval (compute only, as ``cycle_estimate``)."""
        return sum(c.cycles for c in self.calls)


@dataclass(frozen=True)
class TopDownResult:
    operator: Operator
    intrinsic: Intrinsic
    program: Program
    search: SearchResult
    embeddings: tuple[TopDownEmbedding, ...]   # fewest calls first

    @property
    def found(self) -> bool:
        return bool(self.embeddings)

    def summary(self) -> str:
        r = self.search
        head = (f"{len(self.embeddings)} top-down embedding(s) of {self.intrinsic.name} in {self.operator.name} "
                f"(configuration 4 with input transposes); {r.nodes} TCG nodes, {len(r.candidates):,} candidate "
                f"graphs, hit rate {r.hit_rate:.1%}, {r.seconds:.2f} s")
        if r.timed_out:
            head += "; the search hit its time limit, showing what it found"
        if not self.embeddings and r.candidates:
            best = max(r.candidates, key=lambda c: (c.selection.algebraic_covered, c.selection.covered))
            head += f"\nno embedding: no candidate graph is fully covered; best: {best.program}\n   {best.selection}"
        return head


def topdown_embed(op: Operator, intr: Intrinsic, time_limit: float = float("inf")) -> TopDownResult:
    """Every top-down solution of the intrinsic in the operator, fewest calls first."""
    prog = program_from_operator(op)
    ins = intrinsic_instruction(intr)
    res = search(prog, (ins,), 4, input_transposes=True, time_limit=time_limit)
    found = [_describe(c, ins, intr, op) for c in res.solutions]
    found.sort(key=lambda e: (e.call_count, e.candidate.transformations))
    return TopDownResult(op, intr, prog, res, tuple(found))


def _describe(cand: Candidate, ins: Instruction, intr: Intrinsic, op: Operator) -> TopDownEmbedding:
    prog = cand.program
    calls = tuple(Call(str(prog.statements[c.statement]), c)
                  for c in instruction_calls(prog, cand.tcg, cand.selection, (ins,)))
    total = sum(c.count for c in calls)
    layouts = sorted({f"{ld.tensor.partition('^T')[0]}: transposed to axes "
                      f"({', '.join(ld.tensor.partition('^T')[2])})"
                      for st in prog.statements for ld in _all_loads(st.expr) if "^T" in ld.tensor})
    layouts += [f"{t.out}: result stored as [{','.join(t.dims)}]" for s, t in
                zip(program_from_operator(op).statements, prog.statements, strict=False) if s.dims != t.dims]
    return TopDownEmbedding(cand, calls, op.macs / (total * intr.macs) if total else 0.0, tuple(layouts))


def verify(result: TopDownResult, emb: TopDownEmbedding, seed: int = 0) -> tuple[bool, str]:
    """Run the embedding with NumPy emulations of the intrinsic on random integers; compare with the operator."""
    prog = result.program
    rng = np.random.default_rng(seed)
    data = {k: rng.integers(-8, 8, size=v).astype(np.float64) for k, v in input_shapes(prog).items()}
    out = prog.statements[-1]
    ref = evaluate(prog, data)[out.out]
    cand = emb.candidate
    got = run_selection(cand.program, cand.tcg, cand.selection, (intrinsic_instruction(result.intrinsic),),
                        data)[out.out]
    final = cand.program.statements[-1].dims
    got = got.transpose([final.index(d) for d in out.dims]) if final != out.dims else got
    if got.shape == ref.shape and np.array_equal(got, ref):
        return True, f"{got.size:,} outputs equal to the operator on random integers"
    return False, f"differs from the operator in {int(np.sum(got != ref)) if got.shape == ref.shape else got.size:,} " \
                  f"of {ref.size:,} outputs"
