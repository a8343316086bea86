"""Rules B19 and B20 (docs/mapper.md): a step of compute, and an input stream's whole last tile, follow a memory
port's last load. The latency bound's port tail (rule B13) gains them; it never exceeds the model's latency at any
level of random mappings or of their random completions, an unsafe version does, and on ascend_like they make the
bound of the best mappings exact."""

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.search.bounds import BoundContext
from accelmap.search.spatial import unrolling_of
from accelmap.workload.models import load_model
from strategies import fixed_at_and_above, random_perfect_mappings
from test_bound_network_and_runs import _completions

# Presets with a level that keeps the output and refills during compute (the rule applies), and one without.
PRESETS = ["ascend_like", "tpu_like", "vta_like", "eyeriss_like"]


def _bounds(ctx, op, m):
    """The latency bound at every level of ``m`` (levels >= it fixed as ``m`` has them)."""
    out = []
    for level in range(len(ctx.arch.levels) + 1):
        fixed, rem = fixed_at_and_above(op, m, level)
        out.append(ctx.lower_bound(fixed, level, rem)[1])
    return out


def test_last_step_never_exceeds_the_latency_and_a_longer_step_would():
    """At every level of random mappings the bound stays below the latency. Counting every fixed temporal loop in
    the step (the whole MAC schedule after the port's loads, an unsafe version) exceeds it on some mapping, so this
    check can fail; and the rule is off on eyeriss_like, where no output level refills during compute."""
    checked = applied = unsafe_caught = 0
    for _, arch, op, m in random_perfect_mappings(31, 28, PRESETS):
        latency = evaluate(op, arch, m).latency
        ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m))
        if arch.name == "eyeriss_like":
            assert ctx.last_step_level is None
        for got in _bounds(ctx, op, m):
            assert got <= latency * (1 + 1e-12), (arch.name, m, got, latency)
        checked += 1
        if ctx.last_step_level is None:
            continue
        applied += 1
        ctx.last_step_level = 0     # unsafe: every temporal loop, the whole schedule, after the loads
        unsafe_caught += max(_bounds(ctx, op, m)) > latency * (1 + 1e-9)
    assert checked >= 20 and applied >= 10
    assert unsafe_caught >= 1


def _layer4_conv2_on_ascend(r_level: int, k_level: int, q_level: int):
    """ResNet-18 layer4.0.conv2 on ascend_like, a mapping of the tied best: weights streamed from DRAM into L0B,
    R, the outer K and Q at the given levels."""
    arch = get_accelerator("ascend_like")
    op = adopt_precision(next(l for l in load_model("resnet18").layers if l.name == "layer4.0.conv2").operator, arch)
    L = Loop
    m = Mapping((L("C", 32, 0), L("R", 3, r_level), L("K", 16, k_level), L("S", 3, 4), L("Q", 7, q_level),
                 L("K", 16, 5, "X"), L("K", 2, 5, "Y"), L("P", 7, 5, "Y"), L("C", 16, 5, "Z")),
                (frozenset("IWO"), frozenset(), frozenset(), frozenset("O"), frozenset("I"), frozenset("W")))
    return arch, op, m


def test_last_step_makes_a_best_mapping_exact_on_ascend_like():
    """ResNet-18 layer4.0.conv2 on ascend_like streams its weights from DRAM into L0B: the DRAM read port carries
    150,048 cycles of loads, then a step of compute (Q = 7 iterations at L0B, 7 cycles) and the output's last drain
    from L0C (1,568 cycles). The bound with every loop fixed, and with every level but DRAM fixed, is the model's
    151,623 cycles; without the step it was 151,616, below the many mappings that tie with this one."""
    arch, op, m = _layer4_conv2_on_ascend(r_level=1, k_level=4, q_level=5)
    assert evaluate(op, arch, m).latency == 151_623.0
    ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m))
    assert ctx.last_step_level == 5
    bounds = _bounds(ctx, op, m)
    assert bounds[0] == bounds[1] == 151_623.0
    ctx.last_step_level = None
    assert _bounds(ctx, op, m)[0] == 151_616.0


def test_last_tile_never_exceeds_any_completion_and_an_unsafe_version_would(monkeypatch):
    """Rule B20 at every level of random mappings, against the mapping and random completions that re-deal and
    re-order the open levels' loops (the node's bound must hold for all of them). Taking every stream's last tile
    as the whole run (share 1 with the other streams' loads kept: the compute after all loads, an unsafe version)
    exceeds some latency, so this check can fail."""
    import random

    rng = random.Random(5)
    checked = 0
    for _, arch, op, m in random_perfect_mappings(44, 9, ["ascend_like", "tpu_like", "vta_like"]):
        ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m))
        for level in range(len(arch.levels) + 1):
            fixed, rem = fixed_at_and_above(op, m, level)
            got = ctx.lower_bound(fixed, level, rem)[1]
            for other in [m, *_completions(rng, op, arch, m, level, 1)]:
                assert got <= evaluate(op, arch, other).latency * (1 + 1e-12), (arch.name, level, m, other)
                checked += 1
    assert checked >= 30
    caught = 0
    monkeypatch.setattr("accelmap.search.bounds.last_tile_tail",
                        lambda op, fixed, level, unfixed, streams, compute: max(
                            (sum(streams.values()) + compute for (_, c, name) in streams
                             if c >= level and not op.operand(name).is_output), default=0.0))
    for _, arch, op, m in random_perfect_mappings(44, 16, ["ascend_like", "tpu_like", "vta_like"]):
        ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m))
        caught += ctx.lower_bound(m.loops, 0, dict.fromkeys(op.sizes, 1))[1] > evaluate(op, arch, m).latency * 1.000001
    assert caught >= 1


def test_last_tile_makes_tied_mappings_exact_on_ascend_like():
    """On ResNet-18 layer4.0.conv2 many mappings tie with the best (151,623 cycles). In this one the weights' tile in
    L0B stays for Q's 7 iterations at L0A, so after the DRAM port's last load (150,048 cycles) the last weight tile
    computes 7 steps of one cycle, then the output drains (1,568): the model's latency. With B19 alone (one step) the
    bound was 151,617, below the tie, and such mappings were costed; with B20 it is exact with every loop fixed and
    with every level but DRAM fixed."""
    arch, op, m = _layer4_conv2_on_ascend(r_level=0, k_level=3, q_level=4)
    assert evaluate(op, arch, m).latency == 151_623.0
    ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m))
    bounds = _bounds(ctx, op, m)
    assert bounds[0] == bounds[1] == 151_623.0
    ctx.last_step_level = None      # neither rule
    assert _bounds(ctx, op, m)[0] == 151_616.0
