"""A strategy's time limit covers its certificate, and `optimal` is never worse than `heuristic` at one limit.

The certificate (``search/certificate.py``) computes the full bound (rule S1 over rule S2) in chunks against a
share of the limit and falls back to the relaxed bound (rule S8) past it; the relaxed bound must hold wherever the
full one does (it is at most the full one, and at most every mapping's cost). The exact search gives the heuristic
its whole limit and configuration, so its incumbent is the heuristic's own result."""

from __future__ import annotations

import random
import time

import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import preset_names
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError, SpecError
from accelmap.mapping.sampling import random_mapping
from accelmap.search import certificate as certificate_module
from accelmap.search import heuristic as heuristic_module
from accelmap.search import spatial
from accelmap.search.bounds import chain_options
from accelmap.search.certificate import FULL, RELAXED, certificate, relaxed_lower_bound
from accelmap.search.exact import search_exact
from accelmap.search.heuristic_config import HeuristicConfig
from accelmap.search.mapper import CERTIFICATE_SHARE, map_operator
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import CertificateOutOfTime, certified_lower_bound
from accelmap.workload import parse_expression
from accelmap.workload.constructors import conv2d, gemm

OPS = [conv2d(c=4, h=6, w=6, k=8, r=3, s=3, padding=1), gemm(m=8, n=12, k=16), gemm(m=5, n=7, k=6)]


def _chains(op, arch, cons):
    return chain_options(op, keep_options(op, arch, cons))


def test_relaxed_bound_is_below_the_full_bound_and_every_mapping():
    """On every preset: the relaxed bound's energy, latency and EDP are at most the full one's (with and without a
    fixed axis), and its energy and latency at most those of random valid mappings."""
    rng = random.Random(3)
    checked = 0
    for name in preset_names():
        arch = get_accelerator(name)
        axis = next(iter(arch.fanout_axes()), None)
        for base in OPS:
            op = adopt_precision(base, arch)
            constraint_sets = [Constraints()]
            if axis is not None:
                out_dim = next(d for d in op.dim_names if d in op.output.dims)
                constraint_sets.append(Constraints(spatial={axis: {out_dim: 2}}))
            for cons in constraint_sets:
                try:
                    cons.check(op, arch)
                except SpecError:
                    continue
                chains = _chains(op, arch, cons)
                full = certified_lower_bound(op, arch, cons, chains, "edp")
                relaxed = relaxed_lower_bound(op, arch, cons, chains, "edp")
                assert 0 < relaxed[0] <= full[0] * (1 + 1e-12), (name, op.name, cons)
                assert 0 < relaxed[1] <= full[1] * (1 + 1e-12) and 0 < relaxed[2] <= full[2] * (1 + 1e-12)
                checked += 1
            energy_lb, latency_lb = relaxed_lower_bound(op, arch, Constraints(), _chains(op, arch, Constraints()),
                                                        "edp")[1:]
            for _ in range(3):
                try:
                    m = random_mapping(op, arch, rng, check_fit=True, tries=30, spatial_prob=0.8)
                except MappingError:
                    continue
                res = evaluate(op, arch, m)
                assert energy_lb <= res.energy_total * (1 + 1e-12) and latency_lb <= res.latency * (1 + 1e-12)
                checked += 1
    assert checked >= 60


def test_full_bound_in_chunks_is_the_bound_in_one_and_reads_the_clock_between_them(monkeypatch):
    arch = get_accelerator("tpu_like")
    op = adopt_precision(gemm(m=8, n=12, k=16), arch)         # 1,988 combinations
    cons = Constraints()
    chains = _chains(op, arch, cons)
    whole = certified_lower_bound(op, arch, cons, chains, "edp")
    monkeypatch.setattr(spatial, "CERTIFICATE_CHUNK", 500)
    assert certified_lower_bound(op, arch, cons, chains, "edp") == whole        # bit for bit
    reads = []

    def counting_clock() -> float:          # a deterministic clock: one second per read
        reads.append(None)
        return float(len(reads))

    assert certified_lower_bound(op, arch, cons, chains, "edp", deadline=1e9, clock=counting_clock) == whole
    assert len(reads) == 4                  # one read per chunk
    reads.clear()
    with pytest.raises(CertificateOutOfTime):
        certified_lower_bound(op, arch, cons, chains, "edp", deadline=2.5, clock=counting_clock)
    assert len(reads) == 3                  # it stops at the first read past the deadline


def test_certificate_says_which_bound_it_is(monkeypatch):
    arch = get_accelerator("vta_like")
    op = adopt_precision(gemm(m=2, n=4, k=2), arch)
    cons = Constraints()
    chains = _chains(op, arch, cons)
    ticks = iter(range(10**6))
    clock = lambda: float(next(ticks))              # noqa: E731  (deterministic)
    full = certificate(op, arch, cons, "edp", deadline=None, clock=clock)
    assert full.kind == FULL and full.value == certified_lower_bound(op, arch, cons, chains, "edp")[0]
    late = certificate(op, arch, cons, "edp", deadline=-1.0, clock=clock)
    assert late.kind == RELAXED and late.value == relaxed_lower_bound(op, arch, cons, chains, "edp")[0]
    assert late.value <= full.value
    # map_operator says in the result when the full bound missed its share of the limit.
    monkeypatch.setattr(certificate_module, "certified_lower_bound",
                        lambda *a, **k: (_ for _ in ()).throw(CertificateOutOfTime()))
    res = map_operator(op, arch, "edp", strategy="heuristic", time_limit=30)
    assert res.bound_kind == RELAXED and res.lower_bound == late.value
    assert any("relaxed" in n for n in res.notes)
    assert res.best is not None and res.best.value >= res.lower_bound


def test_time_limit_covers_the_certificate_on_cpu_seconds():
    """BERT's attention.scores (12 heads of 128x128x64) on ascend_like: the full bound alone takes about 4 s of CPU
    (383,554 combinations). With a 0.4 s limit on the CPU clock the certificate stops at its share and the relaxed
    bound stands in; the whole call stays within the limit plus the heuristic's last costing (it costs at least one
    candidate past its deadline)."""
    arch = get_accelerator("ascend_like")
    op = adopt_precision(parse_expression("O[b,m,n] += I[b,m,k] * W[b,k,n]", name="scores",
                                          sizes={"b": 12, "m": 128, "n": 128, "k": 64}), arch)
    limit = 0.4
    c0 = time.process_time()
    res = map_operator(op, arch, "edp", strategy="heuristic", time_limit=limit,
                       heuristic_config=HeuristicConfig(cpu_clock=True))
    spent = time.process_time() - c0
    assert res.bound_kind == RELAXED and res.stats.extra["seconds_certificate"] <= CERTIFICATE_SHARE * limit + 0.3
    assert res.best is not None and res.best.value >= res.lower_bound
    assert spent <= limit + 0.6, spent


def test_exact_search_gives_the_heuristic_its_whole_limit_and_config(monkeypatch):
    """Before, the heuristic inside the exact search got a quarter of the limit, so its probes had a quarter of the
    budget of `--strategy heuristic` at the same limit and could pick a worse unrolling that the exact search did
    not reach in time (BERT attention.scores on eyeriss_like, 10 s: 3.34e13 EDP against 2.92e13). Now it runs as
    the heuristic strategy does, and its result is the incumbent: the exact search's best is never worse."""
    arch = get_accelerator("vta_like")
    op = adopt_precision(gemm(m=2, n=4, k=2), arch)
    config = HeuristicConfig(cpu_clock=True, climbs=2)
    alone = heuristic_module.search_heuristic(op, arch, "edp", time_limit=7.0, config=config)
    calls = []

    def recording(*args, **kwargs):         # the heuristic's answer, and what it was asked
        calls.append((kwargs.get("time_limit"), kwargs.get("config")))
        return alone

    monkeypatch.setattr(heuristic_module, "search_heuristic", recording)
    got, st = search_exact(op, arch, "edp", time_limit=7.0, heuristic_config=config)
    assert calls == [(7.0, config)]
    assert st.extra["proven"] and got[0].value <= alone[0][0].value
