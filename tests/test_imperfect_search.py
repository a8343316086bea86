"""Imperfect factorization (Ruby-style, the last tile partial) in the exact searches.

The exact branch and bound over imperfect tiles (``search_optimal(imperfect=True)`` and the exact search
with the unrolling enumerated, ``search_exact(imperfect=True)``) must find the optimum of the exhaustive
enumeration of every imperfect mapping, on small accelerators and operators where that enumeration runs in
a fraction of a second; and never be worse than the same search over perfect factors."""

import itertools
import math
import random

from accelmap.arch.schema import accelerator_from_dict
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.sampling import slots
from accelmap.mapping.validate import check_structure
from accelmap.search import search_exhaustive, search_optimal
from accelmap.search.exhaustive import ordered_factorizations
from accelmap.search.imperfect_tiles import full_positions, imperfect_factorizations
from accelmap.search.space import Constraints, keep_options
from accelmap.workload import gemm, parse_expression


def _brute_force(n: int, parts: int) -> set[tuple[int, ...]]:
    """Every bound sequence (outermost first) whose product covers n and whose loops each start inside n."""
    out = set()
    for seq in itertools.product(range(1, n + 1), repeat=parts):
        stride, ok = 1, True
        for b in reversed(seq):
            ok &= (b - 1) * stride < n
            stride *= b
        if ok and stride >= n:
            out.add(seq)
    return out


def test_imperfect_factorizations_equal_brute_force():
    counts = {}
    for n in range(1, 10):
        for parts in range(1, 5):
            got = imperfect_factorizations(n, parts)
            assert len(got) == len(set(got)) and set(got) == _brute_force(n, parts), (n, parts)
            assert set(ordered_factorizations(n, parts)) <= set(got)
            counts[(n, parts)] = len(got)
    # A few by hand: 5 over two slots is (5,1) (3,2) (2,3) (2,4) (1,5); over one slot only (5,).
    assert sorted(imperfect_factorizations(5, 2)) == [(1, 5), (2, 3), (2, 4), (3, 2), (5, 1)]
    assert counts[(5, 1)] == 1 and counts[(2, 3)] == 3 and counts[(1, 4)] == 1


def _chain(levels: int) -> dict:
    """An accelerator of ``levels`` temporal levels (no fan-out, unbounded): its slots are its levels."""
    lv = [{"name": f"L{levels - i}", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "16 bit",
           "read_energy": "1 pJ", "write_energy": "1 pJ", "bypass": False} for i in range(levels)]
    return accelerator_from_dict({"name": "chain", "levels": lv,
                                  "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 32}}})


def test_the_model_accepts_exactly_the_imperfect_factorizations():
    """The candidate rule is the cost model's own: every bound sequence of a 1-D operator over the slots of a
    plain chain of levels passes the mapping validator exactly when it is one of imperfect_factorizations."""
    for levels in (2, 3):
        arch = _chain(levels)
        for n in (4, 5, 6, 7):
            op = parse_expression("O[p] += I[p] * W[p]", {"p": n})
            legal = set(imperfect_factorizations(n, levels))
            for seq in itertools.product(range(1, n + 2), repeat=levels):
                m = Mapping(tuple(Loop("p", b, lv) for lv, b in enumerate(seq) if b > 1),
                            tuple(frozenset({"I", "W", "O"}) for _ in range(levels)))
                try:
                    check_structure(op, arch, m)
                    ok = True
                except MappingError:
                    ok = False
                assert ok == (seq in legal), (n, seq)


def test_full_positions_count_whole_tiles():
    op = gemm("g", m=10, n=4, k=3)
    # M in tiles of 4 (two whole, one partial), N whole, K in tiles of 2 (one whole, one partial).
    loops = (Loop("M", 4, 1), Loop("N", 4, 1), Loop("K", 2, 1))
    assert full_positions(op, loops) == 2 * 1 * 1
    assert full_positions(op, ()) == 10 * 4 * 3
    assert full_positions(op, (Loop("M", 3, 0), Loop("M", 4, 1))) == 0    # 12 > 10: clipped, never whole


def _small_arch(rng: random.Random) -> dict:
    """Two or three levels with small capacities (so tile sizes matter) and a small fan-out."""
    nlev = rng.choice([2, 2, 3])
    levels = []
    for i in range(nlev):
        lv = {"name": f"L{nlev - i}", "holds": ["I", "W", "O"], "width": "16 bit",
              "capacity": "unbounded" if i == 0 else f"{rng.choice([6, 10, 16, 24])} B",
              "read_energy": f"{[20, 4, 1][i]} pJ", "write_energy": f"{[20, 4, 1][i]} pJ",
              "bypass": bool(i) and rng.random() < 0.3,
              "read_bandwidth": f"{rng.choice([8, 16, 32])} bit/cycle"}
        if i == nlev - 2:
            lv["fanout"] = {"axes": [{"name": "X", "size": rng.choice([2, 3, 4]), "multicast": True,
                                      "reduce": rng.random() < 0.5}], "transfer_energy": "1 pJ"}
        levels.append(lv)
    return accelerator_from_dict({"name": "small", "levels": levels,
                                  "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 32}}})


def _small_cases(n_cases: int, max_space: int = 400):
    rng = random.Random(7)
    exprs = [("O[m,n] += I[m,k] * W[k,n]", ("m", "n", "k")), ("O[k,p] += I[p+r] * W[k,r]", ("k", "p", "r"))]
    out = []
    while len(out) < n_cases:
        arch = _small_arch(rng)
        expr, dims = rng.choice(exprs)
        op = parse_expression(expr, {d: rng.choice([1, 2, 3, 5, 7]) for d in dims})
        size = math.prod(len(imperfect_factorizations(s, len(slots(arch)))) for _, s in op.dims)
        if size * len(keep_options(op, arch, Constraints())) <= max_space:
            out.append((arch, op))
    return out


def test_exact_search_over_imperfect_tiles_equals_exhaustive():
    """Every objective: the branch and bound over imperfect tiles equals the exhaustive optimum over imperfect
    mappings (one exhaustive pass: its energy-latency front holds the optimum of each), and so does the exact
    search with the unrolling enumerated (EDP), proven; neither is worse than the perfect optimum, and on some
    cases imperfect tiles are strictly better (the test can see a search that ignores them)."""
    from accelmap.search.exact import search_exact

    value = {"energy": lambda r: r.energy_total, "latency": lambda r: r.latency,
             "edp": lambda r: r.energy_total * r.latency}
    strictly_better = compared = 0
    for arch, op in _small_cases(7):
        front, st = search_exhaustive(op, arch, "pareto", imperfect=True, time_limit=60)
        assert not st.extra.get("timed_out")
        for objective, f in value.items():
            tree, _ = search_optimal(op, arch, objective, imperfect=True)
            perfect, _ = search_optimal(op, arch, objective)
            if not front:
                assert not tree and not perfect
                continue
            best = min(f(x.result) for x in front)
            assert math.isclose(tree[0].value, best, rel_tol=1e-9), (arch, op, objective, tree[0].mapping)
            if perfect:
                assert best <= perfect[0].value * (1 + 1e-9)
                strictly_better += best < perfect[0].value * (1 - 1e-9)
            if objective == "edp":
                exact, st_exact = search_exact(op, arch, objective, heuristic=False, imperfect=True)
                assert math.isclose(exact[0].value, best, rel_tol=1e-9) and st_exact.extra["proven"]
            compared += 1
    assert compared >= 18 and strictly_better >= 3


def test_node_bounds_over_imperfect_tiles_never_exceed_the_cost():
    """Rules I2 and I3: on random imperfect mappings of every preset, the node bound at every level (with the
    fan-outs free and fixed, and over every order of the node's level, rules B3/B4) stays below the cost, the
    fixed nest's refetches counted at its whole positions only."""
    from accelmap.arch import get_accelerator
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.cost.model import evaluate
    from accelmap.mapping.sampling import random_mapping
    from accelmap.search.imperfect_tiles import ImperfectBoundContext, ceil_div, dim_products
    from accelmap.search.optimal import bound_any_order
    from strategies import random_operator

    presets = ["eyeriss_like", "simba_like", "tpu_like", "edge_tpu_like", "ascend_like", "vta_like", "diana_like"]
    rng = random.Random(3)
    checked = partial = 0
    for n in range(160):
        arch = get_accelerator(presets[n % len(presets)])
        op = adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=30, imperfect=True)
        except MappingError:
            continue
        res = evaluate(op, arch, m)
        spatial: dict[str, dict[str, int]] = {name: {} for name in arch.fanout_axes()}
        for l in m.loops:
            if l.spatial and l.bound > 1:
                spatial[l.axis][l.dim] = spatial[l.axis].get(l.dim, 1) * l.bound
        for ctx in (ImperfectBoundContext(op, arch, m.keep), ImperfectBoundContext(op, arch, m.keep, spatial)):
            for level in range(len(arch.levels) + 1):
                fixed = tuple(l for l in m.loops if l.level >= level)
                prod = dim_products(op, fixed)
                rem = {d: ceil_div(op.sizes[d], prod[d]) for d in op.dim_names}
                full = full_positions(op, fixed)
                partial += full < math.prod(rem.values())
                below = lambda b: b[0] <= res.energy_total * (1 + 1e-12) and b[1] <= res.latency * (1 + 1e-12)
                assert below(ctx.lower_bound(fixed, level, rem, full_positions=full)), (level, m)
                if level < len(arch.levels):
                    # Rule B4's alternatives (one per loop the level may put innermost): one covers this order.
                    alts = bound_any_order(ctx, fixed, level, rem, frozenset({level}), imperfect=True)
                    assert any(below(b) for b in alts), (level, m)
        checked += 1
    assert checked > 80 and partial > 50


def test_ruby_s_mode_equals_exhaustive_over_its_space():
    """imperfect="spatial" (Ruby-S: only spatial loops imperfect, temporal loops divide what is left): the branch
    and bound equals the exhaustive enumeration of that space, which lies between the perfect and the full one."""
    checked = 0
    for arch, op in _small_cases(5):
        spatial_slots = tuple(axis is not None for _, axis, _ in slots(arch))
        for _, n in op.dims:
            got = set(imperfect_factorizations(n, len(spatial_slots), spatial_slots))
            assert set(ordered_factorizations(n, len(spatial_slots))) <= got <= set(
                imperfect_factorizations(n, len(spatial_slots)))
        front, _ = search_exhaustive(op, arch, "pareto", imperfect="spatial", time_limit=60)
        for objective, f in (("latency", lambda r: r.latency), ("edp", lambda r: r.energy_total * r.latency)):
            tree, _ = search_optimal(op, arch, objective, imperfect="spatial")
            if not front:
                assert not tree
                continue
            assert math.isclose(tree[0].value, min(f(x.result) for x in front), rel_tol=1e-9), (arch, op, objective)
            checked += 1
    assert checked >= 8


def row_of_four():
    """DRAM with a 4-wide multicast, non-reducing fan-out over one 64 B register file."""
    return accelerator_from_dict({"name": "row", "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "16 bit",
         "read_energy": "50 pJ", "write_energy": "50 pJ", "fanout": {"axes": [
             {"name": "X", "size": 4, "multicast": True, "reduce": False}], "transfer_energy": "1 pJ"}},
        {"name": "RF", "holds": ["I", "W", "O"], "capacity": "64 B", "width": "16 bit",
         "read_energy": "1 pJ", "write_energy": "1 pJ"}],
        "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 32}}})


def test_map_operator_with_imperfect_tiles_accepts_padded_constraints_and_beats_perfect():
    """A prime dim on a 4-wide axis: perfect factors can unroll only 1 of it (5 > 4); imperfect tiles unroll 3
    per round (two rounds) and halve the latency, and so does the default exact search, whose padded unrollings
    take the same two rounds. The exhaustive strategy refuses a padded constraint without imperfect tiles (the exact one
searches it: ``test_search_padded_unrollings.py``)."""
    import pytest

    from accelmap.errors import SpecError
    from accelmap.search.exact import search_exact
    from accelmap.search.mapper import map_operator

    arch = row_of_four()
    op = gemm("g", m=5, n=2, k=2)
    perfect, _ = search_exhaustive(op, arch, "latency")
    padded, st_p = search_exact(op, arch, "latency", heuristic=False)
    imperfect, st_i = search_exact(op, arch, "latency", heuristic=False, imperfect=True)
    assert st_p.extra["proven"] and st_i.extra["proven"]
    assert imperfect[0].value < perfect[0].value
    # The default exact search unrolls padded too (rule E2 of docs/mapper.md): it finds the two rounds of 3.
    assert padded[0].value == imperfect[0].value and st_p.extra["spatial_padded_searched"] > 0
    assert any(l.spatial and l.dim == "M" and 5 % l.bound for l in imperfect[0].mapping.loops)
    padded = Constraints(spatial={"X": {"M": 3}})
    # The exact search searches the padded constraint over Ruby-S tiles (rule E2); the exhaustive one needs to be
    # told to enumerate them.
    with pytest.raises(SpecError, match="exhaustive search covers perfect factorizations only"):
        map_operator(op, arch, "latency", strategy="exhaustive", constraints=padded)
    fixed = map_operator(op, arch, "latency", strategy="optimal", constraints=padded, imperfect="spatial",
                         time_limit=20)
    assert fixed.best is not None and fixed.proven_optimal
    heuristic = map_operator(op, arch, "latency", strategy="heuristic", imperfect=True, time_limit=2)
    assert any("not searched by the heuristic" in note for note in heuristic.notes)


def test_map_cli_refuses_both_imperfect_flags(tmp_path):
    from click.testing import CliRunner

    from accelmap.cli import main
    from test_map_cli import _setup

    arch, table = _setup(tmp_path)
    r = CliRunner().invoke(main, ["map", table, "--arch", arch, "--imperfect", "--imperfect-spatial"])
    assert r.exit_code == 2 and "exclude each other" in r.output


def test_map_cli_imperfect_flags_search_again_and_cache_apart(tmp_path):
    """``accelmap map --imperfect`` is its own search (not the perfect run's cached result), then cached."""
    from click.testing import CliRunner

    from accelmap.cli import main
    from test_map_cli import _setup

    arch, table = _setup(tmp_path)
    cache = tmp_path / "c.sqlite"

    def run(*flags, n):
        r = CliRunner().invoke(main, ["map", table, "--arch", arch, "--strategy", "optimal", "--out",
                                      str(tmp_path / f"out{n}"), "--cache", str(cache), "--jobs", "1",
                                      "--time-limit", "1", "--no-plots", *flags])
        assert r.exit_code == 0, r.output
        return r.output

    assert "2 searched, 0 from the cache" in run(n=0)
    assert "2 searched, 0 from the cache" in run("--imperfect-spatial", n=1)
    assert "0 searched, 2 from the cache" in run("--imperfect-spatial", n=2)
    assert "2 searched, 0 from the cache" in run("--imperfect", n=3)
