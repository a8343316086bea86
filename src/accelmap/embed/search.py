"""Find the embeddings of an intrinsic in an operator: modes, portfolio, bad input, ranking.

strict  -- the TVM/VTA strategy: stride 1, one operator dim per intrinsic axis,
           each the only term of its tensor axes (no rule-1 rewrites, no fusion),
           memory-access constraints on, inputs in body order (a=data, b=weights).
relaxed -- two searches side by side (Rieber's 2022 dissertation, sec. 4.5.2): with the memory
           constraint and tensor-space rectangles, and without it in access space
           (data may be duplicated: im2col); arbitrary strides, fused dims, both
           operand orders.

The portfolio runs one asset per ordered choice of leading dimensions
(eq. 4.40) in parallel processes; every asset contributes its first solutions.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from accelmap.arch.accelerator import Accelerator
from accelmap.arch.intrinsics import Intrinsic
from accelmap.embed.csp import Options, SearchStats, Solution, run_asset, tensor_axis_of
from accelmap.embed.dataflow import dataflow
from accelmap.embed.program import Program, build_program
from accelmap.embed.rank import Costs, costs, mapped_latency
from accelmap.workload.operator import Operator


@dataclass(frozen=True)
class Embedding:
    program: Program
    costs: Costs

    @property
    def solution(self) -> Solution:
        return self.program.solution


@dataclass
class EmbedResult:
    operator: Operator
    intrinsic: Intrinsic
    mode: str
    embeddings: list[Embedding] = field(default_factory=list)
    solutions: list[Solution] = field(default_factory=list)   # every solution found, in search order
    stats: SearchStats = field(default_factory=SearchStats)
    reason: str = ""                      # why there is no embedding, when there is none

    @property
    def found(self) -> bool:
        return bool(self.embeddings)

    def summary(self) -> str:
        s = self.stats
        head = (f"{len(self.embeddings)} embedding(s) of {self.intrinsic.name} in {self.operator.name} "
                f"({self.mode}); {s.expanded} expanded nodes, {s.assets} asset(s), {s.seconds:.2f} s")
        if s.timed_out:
            head += "; the search hit its time limit, showing what it found"
        if self.reason:
            head += f"\nno embedding: {self.reason}"
        return head


def precheck(op: Operator, intr: Intrinsic) -> str | None:
    """Why the intrinsic cannot compute any part of the operator, or None."""
    iop = intr.operator
    if len(op.inputs) != 2:
        return (f"{op.name} multiplies {len(op.inputs)} operand(s) per update; {intr.name} is a two-operand "
                f"multiply-accumulate")
    if not op.dims:
        return f"{op.name} has no loop dimensions"
    out_i, out_o = iop.output, op.output
    if out_o.bits > out_i.bits:
        return (f"output {out_o.name} is {out_o.bits}-bit; {intr.name} accumulates in {out_i.bits} bits")
    ok = [perm for perm in itertools.permutations(op.inputs)
          if all(o.bits <= i.bits for o, i in zip(perm, iop.inputs, strict=True))]
    if not ok:
        bits = ", ".join(f"{o.name}:{o.bits}" for o in op.inputs)
        ib = ", ".join(f"{o.name}:{o.bits}" for o in iop.inputs)
        return f"operand precision ({bits} bits) exceeds what {intr.name} multiplies ({ib} bits)"
    red_i = [d for d, _ in iop.dims if d not in iop.output.dims]
    red_o = [d for d in op.dim_names if d not in op.output.dims]
    if red_i and not red_o:
        return f"{op.name} has no reduction to map onto {intr.name}'s reduction axis {', '.join(red_i)}"
    return None


def _role_orders(op: Operator, iop: Operator, swap: bool) -> list[tuple[tuple[str, str], ...]]:
    out = []
    perms = list(itertools.permutations(op.inputs)) if swap else [tuple(op.inputs)]
    for perm in perms:
        if all(o.bits <= i.bits for o, i in zip(perm, iop.inputs, strict=True)):
            out.append(((iop.output.name, op.output.name),) +
                       tuple((i.name, o.name) for i, o in zip(iop.inputs, perm, strict=True)))
    return out


def _assets(op: Operator, iop: Operator, max_assets: int) -> list[tuple[str, ...]]:
    """Dimension orders (eq. 4.40): ordered choices of the leading output and reduction dims."""
    out_dims = [d for d in op.dim_names if d in op.output.dims]
    red_dims = [d for d in op.dim_names if d not in op.output.dims]
    ks = sum(1 for d, s in iop.dims if d in iop.output.dims and s > 1)
    kr = sum(1 for d, s in iop.dims if d not in iop.output.dims and s > 1)
    orders = []
    for lead_o in itertools.permutations(out_dims, min(ks, len(out_dims))):
        for lead_r in itertools.permutations(red_dims, min(kr, len(red_dims))):
            rest_o = [d for d in out_dims if d not in lead_o]
            rest_r = [d for d in red_dims if d not in lead_r]
            orders.append(tuple(lead_o) + tuple(rest_o) + tuple(lead_r) + tuple(rest_r))
    return orders[:max_assets]


def mode_options(mode: str, op: Operator, intr: Operator) -> list[Options]:
    bound = max(s for _, s in intr.dims)
    if mode == "strict":
        return [Options(single_term=True, bound=bound, label="strict")]
    if mode != "relaxed":
        raise ValueError(f"mode {mode!r}")
    stride = 1
    for o in op.inputs:
        for ix in o.indices:
            for _, c in ix.terms:
                stride = max(stride, c)
            if len(ix.terms) > 1:
                stride = max(stride, *(op.sizes[d] for d, _ in ix.terms[1:]))
    stride = min(stride, 8)
    return [Options(max_stride=stride, max_fuse=3, bound=bound, swap_roles=True, label="memory"),
            Options(max_stride=stride, max_fuse=3, bound=bound, swap_roles=True, memory=False,
                    rect_space="access", alldiff_inputs=False, label="duplicating")]


def embed(op: Operator, intr: Intrinsic, mode: str = "relaxed", *, arch: Accelerator | None = None,
          time_limit: float = 30.0, per_asset: int = 6, max_assets: int = 36, processes: int | None = None,
          build: bool = True, mapper_top: int = 0) -> EmbedResult:
    """Every embedding the search finds, ranked by (operator cost, combined cost, memory).

    ``mapper_top``: re-cost the best that many (with ``arch``) through the mapper; their
    latencies can only drop, so they stay ahead of the rest.
    """
    res = EmbedResult(op, intr, mode)
    why = precheck(op, intr)
    if why:
        res.reason = why
        return res
    iop = intr.operator
    if _blocked_axis(op, iop, mode):
        # Provably nothing to find: an intrinsic axis has no dim the search could ever open.
        res.reason = _no_solution_reason(op, iop, mode)
        return res
    jobs = []
    t0 = time.monotonic()
    deadline = t0 + time_limit              # one limit for the whole search, not per asset
    for opts in mode_options(mode, op, iop):
        assets = _assets(op, iop, max_assets) if mode == "relaxed" else [op.dim_names]
        for roles in _role_orders(op, iop, opts.swap_roles):
            for order in assets:
                jobs.append((op, iop, roles, opts, order, deadline, per_asset if mode == "relaxed" else 64))
    procs = processes if processes is not None else min(2, os.cpu_count() or 1)
    results = []
    if procs > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(procs) as ex:
            futs = [ex.submit(run_asset, j) for j in jobs]
            for f in futs:
                try:
                    # Assets stop themselves at the deadline; the slack covers process start-up.
                    results.append(f.result(timeout=max(0.0, deadline - time.monotonic()) + 5))
                except TimeoutError:
                    res.stats.timed_out = True
                    f.cancel()
            ex.shutdown(wait=False, cancel_futures=True)
    else:
        for j in jobs:
            results.append(run_asset(j))
    seen: dict[tuple, Solution] = {}
    for sols, st in results:
        res.stats.expanded += st.expanded
        res.stats.assets += st.assets
        res.stats.timed_out |= st.timed_out
        for s in sols:
            seen.setdefault(s.key(), s)
    res.solutions = list(seen.values())
    res.stats.solutions = len(seen)
    res.stats.seconds = time.monotonic() - t0
    if not seen:
        res.reason = _no_solution_reason(op, iop, mode)
        return res
    if build:
        odf = dataflow(op)
        embs = []
        for s in seen.values():
            prog = build_program(op, iop, s, odf)
            embs.append(Embedding(prog, costs(prog, arch)))
        embs.sort(key=_rank_key)
        if arch is not None and mapper_top > 0:
            embs[:mapper_top] = [with_mapper(e, arch) for e in embs[:mapper_top]]
            embs.sort(key=_rank_key)
        res.embeddings = embs
    return res


def _rank_key(e: Embedding) -> tuple:
    return (e.costs.operator_cost, e.costs.combined_cost, e.costs.memory_bytes, str(e.solution))


def with_mapper(e: Embedding, arch: Accelerator) -> Embedding:
    """The embedding with its latency re-modelled through the mapper."""
    return Embedding(e.program, dataclasses.replace(e.costs, mapped_latency=mapped_latency(e.program, arch)))


def _no_solution_reason(op: Operator, iop: Operator, mode: str) -> str:
    sizes = ", ".join(f"{d}={s}" for d, s in iop.dims)
    hint = " (try --mode relaxed)" if mode == "strict" and _blocked_axis(op, iop, "relaxed") is None else ""
    blocked = _blocked_axis(op, iop, mode)
    if blocked:
        return blocked + hint
    return (f"no placement of {iop.name} ({sizes}) over {op.name}'s dimensions satisfies the dataflow, "
            f"hyper-rectangle and memory constraints in {mode} mode{hint}")


def _axis_candidates(op: Operator, iop: Operator, roles: dict[str, str], axis: str, opts: Options) -> list[str]:
    """Operator dims that pass the edge, AllDiff and single-term constraints of a move along ``axis``,
    as the search tests them (``csp._static_ok``) minus the domain and memory conditions: a
    superset of the dims the search may open there. An axis longer than 1 must open one."""
    out_o = [ix.dims[0] for ix in op.output.indices]
    on_output = axis in [ix.dims[0] for ix in iop.output.indices]
    out = []
    for d in op.dim_names:
        if (d in out_o) != on_output:
            continue
        ok = True
        for io in iop.operands:
            t = roles[io.name]
            idx = tensor_axis_of(op, t, d)
            if axis in io.dims:
                if idx is None:
                    ok &= not (io.is_output or opts.alldiff_inputs)
                elif opts.single_term:
                    ok &= len(op.operand(t).indices[idx].terms) == 1
            elif idx is not None:
                ok = False
        if ok:
            out.append(d)
    return out


def _blocked_axis(op: Operator, iop: Operator, mode: str) -> str | None:
    """Why no search can succeed, when an intrinsic axis has no operator dim to walk in any role order."""
    # The loosest options of the mode (data duplication allowed) decide: blocked there, blocked everywhere.
    opts = min(mode_options(mode, op, iop), key=lambda o: (o.alldiff_inputs, o.single_term))
    reasons = []
    for roles in map(dict, _role_orders(op, iop, opts.swap_roles)):
        axis = next((a for a, n in iop.dims if n > 1 and not _axis_candidates(op, iop, roles, a, opts)), None)
        if axis is None:
            return None
        need = [io.name for io in iop.operands if axis in io.dims and (io.is_output or opts.alldiff_inputs)]
        avoid = [io.name for io in iop.operands if axis not in io.dims]
        kind = "an output" if axis in iop.output.dims else "a reduction"
        reasons.append(f"axis {axis} of {iop.name} (size {iop.sizes[axis]}) must walk {kind} dimension of "
                       f"{op.name} that indexes {' and '.join(roles[n] for n in need)}"
                       + (f" but not {' or '.join(roles[n] for n in avoid)}" if avoid else ""))
    reasons = list(dict.fromkeys(reasons))
    return ("; or, with the inputs the other way round, ".join(reasons)
            + f"; {op.name} has no such dimension, and an axis longer than 1 cannot be left empty")


def default_embedding(op: Operator, intr: Intrinsic, arch: Accelerator | None = None) -> Embedding | None:
    """The TVM-like reference: strict mode (NCHW, pad input channels up to the intrinsic)."""
    r = embed(op, intr, "strict", arch=arch, processes=1)
    return r.embeddings[0] if r.embeddings else None


def ratio(ref: float, new: float) -> float:
    return ref / new if new else math.inf
