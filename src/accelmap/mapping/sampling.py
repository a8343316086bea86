"""Random valid mappings: for property tests and the random-sampling mapper.

A mapping is drawn slot by slot: every level has a temporal slot and every
fan-out axis a spatial slot. Each dimension's size is split over a random
subset of slots, perfectly (divisors) or, when allowed, imperfectly (free
inner bounds, the outermost bound is the ceiling that covers the rest).
"""

from __future__ import annotations

import collections
import functools
import random

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.validate import check_capacity, check_structure
from accelmap.workload.operator import Operator


def divisors(n: int) -> list[int]:
    """Divisors of n, ascending. From the prime factors and cached: the searches ask for the same
    sizes again and again, and trial division up to sqrt(n) took 60 s for a 10^12 dimension."""
    return list(_divisors(n))


@functools.lru_cache(maxsize=4096)
def _divisors(n: int) -> tuple[int, ...]:
    out = [1]
    for p, k in collections.Counter(_prime_factors(n)).items():
        out = [d * p ** e for d in out for e in range(k + 1)]
    return tuple(sorted(out))


def prime_factors(n: int) -> list[int]:
    """Prime factors of n with multiplicity, ascending."""
    return list(_prime_factors(n))


@functools.lru_cache(maxsize=4096)
def _prime_factors(n: int) -> tuple[int, ...]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1 if p == 2 else 2
    if n > 1:
        out.append(n)
    return tuple(out)


def slots(arch: Accelerator) -> list[tuple[int, str | None, int]]:
    """(level, axis or None, capacity) in nest order."""
    out: list[tuple[int, str | None, int]] = []
    for i, lv in enumerate(arch.levels):
        out.append((i, None, 0))
        if lv.fanout:
            out.extend((i, a.name, a.size) for a in lv.fanout.axes)
    return out


def random_mapping(op: Operator, arch: Accelerator, rng: random.Random, *, imperfect: bool = False,
                   spatial_prob: float = 0.6, check_fit: bool = False, tries: int = 200) -> Mapping:
    """A random mapping that passes ``check_structure`` (and capacity, if ``check_fit``)."""
    last_err: Exception | None = None
    for _ in range(tries):
        try:
            m = _draw(op, arch, rng, imperfect, spatial_prob)
            check_structure(op, arch, m)
            if check_fit:
                check_capacity(op, arch, m)
            return m
        except MappingError as e:
            last_err = e
    raise MappingError(f"no valid random mapping of {op.name} on {arch.name} in {tries} draws: {last_err}")


def _draw(op: Operator, arch: Accelerator, rng: random.Random, imperfect: bool, spatial_prob: float) -> Mapping:
    sl = slots(arch)
    axis_left = {a: cap for _, a, cap in sl if a}
    axes = {a: ax for a, (_, ax) in arch.fanout_axes().items()}
    out_dims = op.output.dims
    bounds: dict[tuple[int, str], int] = {}
    for d, size in op.dims:
        usable = [k for k, (lv, a, _) in enumerate(sl) if k > 0 and
                  (a is None or (rng.random() < spatial_prob and (d in out_dims or axes[a].reduce)))]
        chosen = sorted(rng.sample(usable, k=rng.randint(0, min(len(usable), 3))))
        prod = 1
        for k in reversed(chosen):          # innermost first: strides are inner products
            a = sl[k][1]
            cap = axis_left[a] if a else size
            if imperfect:
                b = rng.randint(1, max(1, min(cap, size // prod)))
            else:
                b = rng.choice([x for x in divisors(size // prod) if x <= cap])
            prod *= b
            bounds[(k, d)] = b
            if a:
                axis_left[a] //= b
        # The outermost level's temporal slot covers what is left: a ceiling,
        # so its last iteration is the partial tile.
        bounds[(0, d)] = -(-size // prod)
    loops: list[Loop] = []
    for k, (lvl, a, _) in enumerate(sl):
        here = [(d, b) for (kk, d), b in bounds.items() if kk == k and b > 1]
        rng.shuffle(here)
        loops.extend(Loop(d, b, lvl, a) for d, b in here)
    keep = []
    for i, lv in enumerate(arch.levels):
        names = set()
        for o in op.operands:
            if o.cls in lv.holds and (i == 0 or not lv.bypass or rng.random() < 0.75):
                names.add(o.name)
        keep.append(frozenset(names))
    return Mapping(tuple(loops), tuple(keep))
