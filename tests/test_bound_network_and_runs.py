"""Rules B13-B15 (docs/mapper.md): the port tail, the network energy and the runs of the fixed nest that start with a
new first tile, as terms of the node bound. Each node's bound must stay below the cost of every completion of it
(here: the mapping itself and random completions that re-deal and re-order the loops of the open levels), on all
nine presets, and each rule must raise the bound where it applies."""

import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.sampling import prime_factors
from accelmap.mapping.validate import validate
from accelmap.search.bounds import BoundContext
from accelmap.search.spatial import unrolling_of
from accelmap.workload.models import load_model
from strategies import fixed_at_and_above, random_perfect_mappings

ALL_PRESETS = ["eyeriss_like", "simba_like", "tpu_like", "edge_tpu_like", "ascend_like", "vta_like", "vta_8x8x8",
               "diana_like", "aie_like"]


def _mappings(arch_name: str, seed: int, draws: int):
    return random_perfect_mappings(seed, draws, [arch_name])


def _unrolling(arch, m):
    """The mapping's fan-outs as the exact search fixes them (constraints: axis -> {dim: bound})."""
    return unrolling_of(arch, m)


def _completions(rng, op, arch, m, level, count):
    """Valid mappings that keep the loops at levels >= ``level`` and every spatial loop, with the temporal loops of the
    open levels re-dealt prime factor by prime factor over those levels and put in a random order per level."""
    fixed = [l for l in m.loops if l.level >= level or l.spatial]
    temporal: dict[str, int] = {}
    for l in m.loops:
        if l.level < level and not l.spatial:
            temporal[l.dim] = temporal.get(l.dim, 1) * l.bound
    for _ in range(count):
        dealt: dict[tuple[int, str], int] = {}
        for d, b in temporal.items():
            for f in prime_factors(b):
                key = (rng.randrange(level), d)
                dealt[key] = dealt.get(key, 1) * f
        loops = []
        for lv in range(level):
            own = [Loop(d, b, lv) for (at, d), b in dealt.items() if at == lv]
            rng.shuffle(own)
            loops += own + [l for l in fixed if l.level == lv]
        loops += [l for l in fixed if l.level >= level]
        cand = Mapping(tuple(loops), m.keep)
        try:
            validate(op, arch, cand)
        except MappingError:
            continue
        yield cand


@pytest.mark.parametrize("arch_name", ALL_PRESETS)
def test_node_bound_never_exceeds_any_completion(arch_name):
    """At every level, the bound of the node (the unrolling known, as in the exact search, and unknown) is at most
    the cost of the mapping and of random completions that deal the open levels' loops differently (B15's cases
    are orders of those loops across levels)."""
    checked = 0
    for rng, arch, op, m in _mappings(arch_name, 31, 30):
        known = BoundContext(op, arch, m.keep, _unrolling(arch, m))
        free = BoundContext(op, arch, m.keep)
        for level in range(len(arch.levels) + 1):
            fixed, rem = fixed_at_and_above(op, m, level)
            bounds = [ctx.lower_bound(fixed, level, rem) for ctx in (known, free)]
            for cand in [m, *_completions(rng, op, arch, m, level, 6)]:
                res = evaluate(op, arch, cand, check=False)
                for e_lb, l_lb in bounds:
                    assert e_lb <= res.energy_total * (1 + 1e-12), (level, cand, e_lb, res.energy_total)
                    assert l_lb <= res.latency * (1 + 1e-12), (level, cand, l_lb, res.latency)
                checked += 1
    assert checked >= 100


@pytest.mark.parametrize("arch_name", ["eyeriss_like", "simba_like", "tpu_like"])
def test_network_energy_makes_the_leaf_energy_bound_exact(arch_name):
    """Rule B14: with every loop fixed, the energy bound is the model's energy (its fan-outs charge network energy
    per element moved: without B14 the bound missed it on every mapping)."""
    exact = checked = 0
    for _, arch, op, m in _mappings(arch_name, 5, 40):
        res = evaluate(op, arch, m)
        network = sum(v for (where, _), v in res.energy.items() if where.startswith("NoC:"))
        ctx = BoundContext(op, arch, m.keep, _unrolling(arch, m))
        e_lb = ctx.lower_bound(m.loops, 0, dict.fromkeys(op.sizes, 1))[0]
        assert e_lb <= res.energy_total * (1 + 1e-12)
        checked += 1
        exact += network > 0 and abs(e_lb - res.energy_total) <= 1e-9 * res.energy_total
    assert checked >= 20 and exact >= checked // 2, (exact, checked)


def test_port_tail_raises_the_leaf_latency_bound():
    """Rule B13 on ascend_like ResNet-18 layer4.0.conv2 (the weights stream from DRAM straight into L0B): the DRAM
    read port carries 150,048 cycles of loads and the output's last drain from L0C follows them, so with every loop
    fixed the latency bound is 150,447 cycles without rule B29 and the model's 150,454.875 with it (without B13 the bound was the port's
    150,048; 150,440 before rules B19 and B20 added the weights' last tile, Q's 7 steps at L0A, after the port's
    last load), and on random ascend_like and tpu_like mappings it never exceeds the latency."""
    arch = get_accelerator("ascend_like")
    op = adopt_precision(next(l for l in load_model("resnet18").layers if l.name == "layer4.0.conv2").operator, arch)
    L = Loop
    m = Mapping((L("K", 2, 0), L("K", 2, 1), L("C", 4, 1), L("C", 8, 2), L("S", 3, 3), L("K", 4, 4), L("R", 3, 4),
                 L("Q", 7, 4), L("K", 16, 5, "X"), L("K", 2, 5, "Y"), L("P", 7, 5, "Y"), L("C", 16, 5, "Z")),
                (frozenset("IWO"), frozenset("I"), frozenset(), frozenset("O"), frozenset("I"), frozenset("W")))
    res = evaluate(op, arch, m)
    assert res.latency == 150_454.875
    ctx = BoundContext(op, arch, m.keep, _unrolling(arch, m))
    leaf = dict.fromkeys(op.sizes, 1)
    assert ctx.lower_bound(m.loops, 0, leaf)[1] == 150_454.875      # rule B29's bursts: exact at this leaf
    ctx.burst_levels = ()
    assert ctx.lower_bound(m.loops, 0, leaf)[1] == 150_447.0
    plain = ctx.load_port_cycles
    ctx.load_port_cycles = lambda loads, w: (plain(loads, w)[0], {})
    ctx.last_step_level = None      # rules B19 and B20 extend B13's tail: off with it
    assert ctx.lower_bound(m.loops, 0, leaf)[1] == 150_048.0
    for arch_name in ("ascend_like", "tpu_like"):
        for _, arch, op, m in _mappings(arch_name, 8, 20):
            ctx = BoundContext(op, arch, m.keep, _unrolling(arch, m))
            assert ctx.lower_bound(m.loops, 0, dict.fromkeys(op.sizes, 1))[1] <= evaluate(op, arch, m).latency * (
                1 + 1e-12)


def test_operand_orders_raise_the_node_bound():
    """Rule B15: at nodes with open levels, the cases of the order of the operands' innermost plain loops raise the
    bound over B7 alone (which only boosts the users of the innermost loop's dim) on many nodes of several presets."""
    raised = nodes = 0
    for arch_name in ("eyeriss_like", "ascend_like", "simba_like", "tpu_like"):
        for _, arch, op, m in _mappings(arch_name, 12, 30):
            ctx = BoundContext(op, arch, m.keep, _unrolling(arch, m))
            for level in range(1, len(arch.levels)):
                fixed, rem = fixed_at_and_above(op, m, level)
                full = ctx.lower_bound(fixed, level, rem)
                runs = ctx.run_alternatives
                ctx.run_alternatives = lambda r, lv, f, perfect=True, runs=runs: runs(r, lv, f, perfect=False)
                b7 = ctx.lower_bound(fixed, level, rem)
                ctx.run_alternatives = runs
                assert full[0] >= b7[0] * (1 - 1e-12) and full[1] >= b7[1] * (1 - 1e-12)
                nodes += 1
                raised += full[0] > b7[0] * (1 + 1e-9) or full[1] > b7[1] * (1 + 1e-9)
    assert nodes >= 100 and raised >= 10, (raised, nodes)


def test_chained_stalls_raise_the_leaf_latency_bound():
    """Rule B16 on eyeriss_like ResNet-18 (every level single-buffered). conv1 with the outputs past the global
    buffer: the register files' stores go straight to DRAM one after another at every tile change (200,704 cycles
    over DRAM's write port), which no load term saw; the leaf bound rises from 772,501.3 to 903,168 cycles of the
    model's 944,805.75. layer2.0.downsample: the inputs' load into a register file waits for their load into the
    global buffer (12,544 + 44,600.9 cycles); 103,992.9 -> 114,488.9 of 116,564.9. On random leaves of the three
    presets with chains of single-buffered levels the rule never exceeds the latency and raises the bound often."""
    arch = get_accelerator("eyeriss_like")
    layers = {l.name: l.operator for l in load_model("resnet18").layers}
    L = Loop
    glb_inputs = (frozenset("IWO"), frozenset("I"), frozenset("IWO"))
    cases = {
        "conv1": ((L("Q", 7, 0), L("P", 112, 1), L("Q", 8, 1), L("K", 2, 1, "X"), L("R", 7, 1, "X"), L("K", 4, 1, "Y"),
                   L("C", 3, 1, "Y"), L("K", 8, 2), L("Q", 2, 2), L("S", 7, 2)), 944_805.75, 903_168.0, 772_501.3333),
        "layer2.0.downsample": ((L("K", 8, 1), L("P", 4, 1), L("Q", 28, 1), L("C", 2, 1, "X"), L("P", 7, 1, "X"),
                                 L("C", 8, 1, "Y"), L("C", 4, 2), L("K", 16, 2)), 116_564.8889, 114_488.8889, 103_992.8889),
    }
    for name, (loops, latency, bound, without) in cases.items():
        op = adopt_precision(layers[name], arch)
        m = Mapping(loops, glb_inputs)
        assert evaluate(op, arch, m).latency == pytest.approx(latency, abs=1e-3)
        ctx = BoundContext(op, arch, m.keep, _unrolling(arch, m))
        leaf = dict.fromkeys(op.sizes, 1)
        # (rule B56, the global buffer's first fill before the stores, raises conv1's to 909,522.75; rule B71 too)
        ctx.first_fill_terms = ctx.first_queue_terms = []
        assert ctx.lower_bound(loops, 0, leaf)[1] == pytest.approx(bound, abs=1e-3)
        ctx.chain_stall_cycles = lambda X, per, serial, w, first=0.0: 0.0
        ctx.last_drain_terms = []      # (rule B70's last drains, which add to the loads: conv1's 32 cycles)
        assert ctx.lower_bound(loops, 0, leaf)[1] == pytest.approx(without, abs=1e-3)
    raised = leaves = 0
    for arch_name in ("eyeriss_like", "simba_like", "edge_tpu_like"):
        for _, arch, op, m in _mappings(arch_name, 16, 20):
            ctx = BoundContext(op, arch, m.keep, _unrolling(arch, m))
            ctx.first_fill_terms = ctx.first_queue_terms = []
            leaf = dict.fromkeys(op.sizes, 1)
            full = ctx.lower_bound(m.loops, 0, leaf)[1]
            assert full <= evaluate(op, arch, m).latency * (1 + 1e-12)
            ctx.chain_stall_cycles = lambda X, per, serial, w, first=0.0: 0.0
            raised += full > ctx.lower_bound(m.loops, 0, leaf)[1] * (1 + 1e-9)
            leaves += 1
    assert leaves >= 40 and raised >= 5, (raised, leaves)


def downsample_on_edge_tpu():
    """(edge_tpu_like, ResNet-18 layer2.0.downsample, a mapping of it with C on the output register's fan-out)."""
    arch = get_accelerator("edge_tpu_like")
    op = adopt_precision(next(l for l in load_model("resnet18").layers if l.name == "layer2.0.downsample").operator,
                         arch)
    L = Loop
    m = Mapping((L("P", 14, 0), L("Q", 28, 0), L("P", 2, 2), L("C", 2, 2), L("K", 8, 2, "D1"), L("K", 4, 2, "D3"),
                 L("K", 4, 2, "D4"), L("C", 4, 3), L("C", 8, 3, "D2")),
                (frozenset("IWO"), frozenset("IO"), frozenset("W"), frozenset("O"), frozenset("W")))
    return arch, op, m


def test_a_level_that_holds_only_the_fixed_tile_raises_the_root_bound():
    """Rule B17 on edge_tpu_like ResNet-18 layer2.0.downsample: the weight register holds one weight and the output
    register one partial sum, so with every loop open either the weights or the partial sums move at every temporal
    step. The root's latency bound (the unrolling known, as in the exact search) rises from 32,144 to 37,632 cycles of
    this mapping's 126,888, and stays below it."""
    arch, op, m = downsample_on_edge_tpu()
    assert evaluate(op, arch, m).latency == 126_888.0
    ctx = BoundContext(op, arch, m.keep, _unrolling(arch, m))
    root = (len(arch.levels), dict(op.sizes))
    # (rule B56 adds the first input's load into the activation memory: nothing fixed, one element, 0.125 cycles;
    # rule B71 the first weights' loads into the 1,024 weight registers, one each, queued on the weight memory's
    # 512-bit read port: 16 cycles, the larger)
    assert ctx.lower_bound((), *root)[1] == 37_648.0
    ctx.first_queue_terms = []
    assert ctx.lower_bound((), *root)[1] == 37_632.125
    ctx.first_fill_terms = []
    assert ctx.lower_bound((), *root)[1] == 37_632.0
    ctx.holds_only = lambda X, c, tile: False
    assert ctx.lower_bound((), *root)[1] == 32_144.0
