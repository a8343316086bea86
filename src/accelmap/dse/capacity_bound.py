"""A lower bound on energy that depends on the PEs' buffer capacities (rule C of the co-search).

The mapper's certified bound (``search.spatial.certified_lower_bound``) charges every element for
entering each level at least once and never looks at a capacity, so it cannot tell a configuration
with 8-word buffers from one with 128-word buffers. This bound counts what small buffers cost: the
words that must cross the boundary between the PEs' own levels (those below the innermost fan-out)
and the shared levels above, in the red-blue pebble style of Hong and Kung (1981) with the
segment argument of Irony, Toledo and Tiskin (2004), as Demmel and Dinh (2018) apply it to
convolutions. docs/dse.md gives the argument; in short:

* Cut one PE's execution into segments of S transfers (fills of its levels from above, partial
  sums drained up, and operands read past its levels straight from above). In a segment, the
  elements of an input X it touches were resident at the segment's start or came in during it:
  a_X <= C_X + s_X; outputs may also be created there and then stay or leave: a_O <= 2 C_O + s_O,
  with s_A + s_B + s_O <= S (C_X: the PE's capacity for X's class, in elements).
* Every operator dimension indexes exactly two of the three operands (a convolution, a matrix
  product), so by Loomis-Whitney a set V of MACs has |V|^2 <= prod_X |pi_X(V)|, the projections on
  each operand's dimensions; an operand element is reached by at most mult_X points of its
  projection (1 for plain indices; for p + r, all but one term's range), so |pi_X(V)| <= mult_X a_X.
  A segment thus holds at most Phi(S) = max sqrt(prod mult_X a_X) MACs (the a_X filled evenly).
* n MACs over PEs PEs need k >= sum_PE n_PE / Phi(S) segments, one PE's last one partial:
  transfers >= S (n / Phi(S) - PEs), for every S; the bound takes the best S.
* Each transfer costs at least the cheapest access it can be at a shared level (a read, or an
  update for an output), divided by the most instances one access can serve (the multicast or
  reducing fan-out), plus its delivery across the innermost fan-out, which the cost model charges
  per element a PE receives or sends (multicast does not divide it). Those terms are disjoint from
  the MAC energy, so energy >= n e_MAC + transfers x that cost, for every mapping, tiling, order and
  bypass choice.

Operators where some dimension indexes one or all three operands (a depthwise convolution's
channel) get no bound (0): Loomis-Whitney does not apply as written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelmap.arch.accelerator import Accelerator
from accelmap.workload.operator import Operand, Operator


@dataclass(frozen=True)
class CapacityBound:
    energy_pj: float           # lower bound of every mapping's energy (0: none applies)
    transfers: float           # words across the PEs' boundary, summed over PEs
    segment: int               # the S that gives it
    per_transfer_pj: float


def _multiplicity(op: Operator, X: Operand) -> int:
    """Most points of X's dimensions that reach one element of X (1 for plain indices)."""
    m = 1
    for ix in X.indices:
        sizes = [op.sizes[d] for d, _ in ix.terms if op.sizes[d] > 1]
        if len(sizes) > 1:
            m *= math.prod(sizes) // max(sizes)
    return m


def _fill_evenly(base: list[float], s: float, top: list[float]) -> list[float]:
    """Maximise the product of a_i = base_i + s_i with sum s_i = s and a_i <= top_i (water filling)."""
    a = [min(b, t) for b, t in zip(base, top, strict=True)]
    left = s
    while left > 1e-12:
        open_ = [i for i in range(len(a)) if a[i] < top[i]]
        if not open_:
            break
        low = min(a[i] for i in open_)
        at_low = [i for i in open_ if a[i] <= low + 1e-12]
        higher = [a[i] for i in open_ if a[i] > low + 1e-12] + [top[i] for i in at_low]
        step = min(min(higher) - low, left / len(at_low))
        for i in at_low:
            a[i] += step
        left -= step * len(at_low)
    return a


def pe_levels(arch: Accelerator) -> list[int]:
    """The levels each PE has for itself: below the innermost fan-out (without one, all but the outermost)."""
    fans = [i for i, lv in enumerate(arch.levels) if lv.fanout is not None]
    first = fans[-1] + 1 if fans else 1
    return list(range(first, len(arch.levels)))


def capacity_energy_bound(op: Operator, arch: Accelerator) -> CapacityBound:
    """The bound of the module docstring for ``op`` on ``arch``."""
    none = CapacityBound(0.0, 0.0, 0, 0.0)
    if len(op.operands) != 3 or len(op.inputs) != 2:
        return none
    dims = [d for d in op.dim_names if op.sizes[d] > 1]
    if any(sum(d in X.dims for X in op.operands) != 2 for d in dims):
        return none
    inner = pe_levels(arch)
    if not inner:
        return none
    caps = []
    for X in op.operands:
        c = 0
        for i in inner:
            lv = arch.levels[i]
            if X.cls not in lv.holds:
                continue
            part = dict(lv.partitions).get(X.cls)
            bits = part if part is not None else lv.capacity_bits
            if bits is None:
                return none                      # an unbounded PE level: no capacity to count
            c += bits // X.bits
        caps.append(c)
    out = op.operands.index(op.output)
    base = [float(c) * (2 if k == out else 1) for k, c in enumerate(caps)]
    top = [float(op.footprint(X)) for X in op.operands]   # a segment cannot touch more than the tensor
    mult = [_multiplicity(op, X) for X in op.operands]
    n, pes = float(op.macs), float(arch.num_pes)
    best, best_s = 0.0, 0
    s = 1
    while s <= 4 * sum(top):
        a = _fill_evenly(base, s, top)
        phi = min(n, math.sqrt(math.prod(m * x for m, x in zip(mult, a, strict=True))))
        t = s * (n / phi - pes)
        if t > best:
            best, best_s = t, s
        s = s + 1 if s < 64 else int(s * 1.05) + 1
    # What one transfer costs at least, per operand (the cheapest operand's cost is charged to every transfer):
    # - the access at a shared level (the cheapest that can hold its class: a read; for an output also an update),
    #   divided by the most PEs one access can serve (every instance below the shared levels' fan-outs);
    # - its delivery across the innermost fan-out, which the cost model charges per element each PE receives or
    #   sends (fills and drains of the PE's level, or each MAC's operand when the PE's levels bypass it), so
    #   multicast does not divide it.
    shared = [i for i in range(len(arch.levels)) if i < inner[0]]
    serve = 1
    for i in shared:
        fan = arch.levels[i].fanout
        if fan is not None:
            serve *= fan.size
    innermost_fan = arch.levels[inner[0] - 1]
    costs = []
    for X in op.operands:
        access = []
        for i in shared:
            lv = arch.levels[i]
            if X.cls in lv.holds:
                e = min(lv.read_energy_pj, lv.write_energy_pj) if X.is_output else lv.read_energy_pj
                access.append(X.bits / lv.width_bits * e / serve)
        noc = 0.0
        if innermost_fan.fanout is not None:
            noc = innermost_fan.fanout.transfer_energy_pj * X.bits / innermost_fan.width_bits
        costs.append((min(access) if access else 0.0) + noc)
    per = min(costs) if costs else 0.0
    if best <= 0 or per <= 0:
        return CapacityBound(0.0, max(best, 0.0), best_s, per)
    return CapacityBound(n * arch.compute.mac_energy_pj + best * per, best, best_s, per)
