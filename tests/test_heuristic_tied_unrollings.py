"""Unrollings of one lower bound ranked at its place (``HeuristicConfig.tied_unrollings``).

On a fan-out that neither multicasts nor reduces (AccelForge's TPU v4i cores), splitting a matrix product's rows or
its columns over it has one bound; which is better depends on what the buffer above keeps, which the bound does not
see. Ranked with only the first of each bound at its place, the column split fell past the 256 candidates on GPT-3's
projections (docs/fusion.md, "GPT-3 6.7B against AccelForge")."""

import yaml

from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.schema import accelerator_from_dict
from accelmap.search.bounds import chain_options
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC, HeuristicConfig
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import ranked_spatial
from accelmap.workload import gemm

# The TPU v4i-like machine's structure at a small size: 4 cores sharing nothing, a reducing and a multicasting axis.
CORES = yaml.safe_load("""
name: cores_sharing_nothing
compute: {mac_energy: 0.084 pJ, macs_per_cycle: 1, precision: {I: 8, W: 8, O: 8}}
levels:
  - {name: Main, holds: [I, W, O], capacity: unbounded, width: 64 bit, read_energy: 450 pJ, write_energy: 450 pJ,
     read_bandwidth: 64 B/cycle, write_bandwidth: 64 B/cycle}
  - name: Global
    holds: [I, W, O]
    capacity: 4 MiB
    width: 64 bit
    read_energy: 120 pJ
    write_energy: 151 pJ
    read_bandwidth: 256 B/cycle
    write_bandwidth: 128 B/cycle
    fanout: {axes: [{name: Z, size: 4, multicast: false, reduce: false}]}
  - name: Local
    holds: [I, O]
    bypass: false
    capacity: 256 KiB
    width: 64 bit
    read_energy: 16 pJ
    write_energy: 19 pJ
    read_bandwidth: 4096 B/cycle
    write_bandwidth: 4096 B/cycle
    fanout: {axes: [{name: X, size: 16, multicast: false, reduce: true}, {name: Y, size: 16, multicast: true, reduce: false}]}
  - {name: Register, holds: [W], bypass: false, capacity: 1 words, width: 8 bit, read_energy: 0 pJ, write_energy: 0 pJ}
""")


def _ranked(tied: int):
    arch = accelerator_from_dict(CORES)
    op = adopt_precision(gemm(m=256, n=512, k=512), arch)
    cons = Constraints()
    keeps = keep_options(op, arch, cons)
    return ranked_spatial(op, arch, cons, chain_options(op, keeps), "edp", limit=64, tied=tied)


def _z(cand) -> dict:
    return {d: b for d, b in cand.assignment.get((1, "Z"), {}).items() if b > 1}


def test_tied_unrollings_ranked_at_their_bound():
    one, three = _ranked(1), _ranked(3)
    # The best bound's three Z splits (rows, columns, both) come first with tied=3, one after the other.
    first = three[0].bound("edp")
    assert [c.bound("edp") for c in three[:3]] == [first] * 3
    assert len({tuple(sorted(_z(c).items())) for c in three[:3]}) == 3
    assert {c.bound("edp") for c in one} >= {c.bound("edp") for c in three[:3]}
    # With tied=1 only the first of that bound is at its place; the next candidate has another bound.
    assert one[0].assignment == three[0].assignment and one[1].bound("edp") > first
    # The same candidates ranked, only their order and the cut at the limit differ.
    assert len(one) == len(three) == 64


def test_default_knob_leaves_cache_key_unchanged():
    assert "tied_unrollings" not in DEFAULT_HEURISTIC.key()
    assert '"tied_unrollings": 3' in HeuristicConfig(tied_unrollings=3).key()
