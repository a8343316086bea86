"""The search's time limit inside its long bound computations.

The branch and bound reads its clock between nodes and between bypass choices, but one node bound can be long where it
computes something for the first time: an open level's tile shapes (up to ``OPEN_FLOOR_SHAPES`` rows) with every case
and order of the loops above it (rules B8/B35, B27, B37, B41, B42) and, at the root, rule B36's points. On ResNet-18
layer2.0.conv1 on eyeriss_like such a root ran 1.44 CPU seconds past a 10-second limit. The search puts its deadline
on the bound context (``ctx.deadline``) and those loops read the clock between steps (``check``); past it they raise
``SearchTimedOut``, which the search catches and reports as a timeout (never as infeasible; no partial value is kept
in any cache, since the computation never returns). A context without a deadline (the certificate, the benchmarks'
direct calls, the tests) never raises.

The clock is ``time.perf_counter`` read at each call (not bound at import), so a benchmark that makes it the process's
CPU clock (``mapper_scaling.py --cpu-clock``) limits these steps on that clock too.
"""

from __future__ import annotations

import time


class SearchTimedOut(Exception):
    """The search's deadline passed inside a bound computation."""


def check(ctx) -> None:
    """Raise ``SearchTimedOut`` when ``ctx`` carries a deadline (``ctx.deadline``, on ``time.perf_counter``'s clock)
    and the clock is past it."""
    deadline = getattr(ctx, "deadline", None)
    if deadline is not None and time.perf_counter() > deadline:
        raise SearchTimedOut
