"""Chains through attention's reshapes and transposes: where a row of the next matrix product's input is a
row of the previous one's output (the Q projection into the scores, the context into the output projection)."""

from __future__ import annotations

import onnx

from accelmap.fusion.chain import fusable_chains
from accelmap.workload.models.bundled import load_model
from accelmap.workload.models.chains import model_chains
from fusion_walk import blocks_agree, simulated_blocks
from onnx_graphs import F, const, graph_model, node, weight

T, D, H = 8, 16, 2          # tokens, width, heads of D // H


def attention(path, q_perm=(0, 2, 1, 3), q_shape=(0, 0, H, D // H), softmax_axis=-1):
    """x -> Q projection -> reshape/transpose -> scores (with K^T) -> softmax -> context (with V) ->
    transpose/reshape -> output projection."""
    heads = lambda x, name, perm, shp="heads": [node("Reshape", [x, shp], [f"{name}.r"]),
                                                node("Transpose", [f"{name}.r"], [f"{name}.t"], perm=list(perm))]
    nodes = [const("heads", [0, 0, H, D // H]), const("qshape", list(q_shape)), const("merged", [0, 0, D]),
             node("MatMul", ["x", "wq"], ["q"]), *heads("q", "q", q_perm, "qshape"),
             node("MatMul", ["x", "wk"], ["k"]), *heads("k", "k", (0, 2, 3, 1)),
             node("MatMul", ["x", "wv"], ["v"]), *heads("v", "v", (0, 2, 1, 3)),
             node("MatMul", ["q.t", "k.t"], ["s"]), node("Softmax", ["s"], ["p"], axis=softmax_axis),
             node("MatMul", ["p", "v.t"], ["c"]), node("Transpose", ["c"], ["c.t"], perm=[0, 2, 1, 3]),
             node("Reshape", ["c.t", "merged"], ["c.r"]), node("MatMul", ["c.r", "wo"], ["y"])]
    inits = [weight(w, [D, D]) for w in ("wq", "wk", "wv", "wo")]
    onnx.save(graph_model(nodes, [("x", F, [1, T, D])], [("y", F, [1, T, D])], inits), path)
    return path


def chains_of(path):
    m = load_model(str(path))
    return m, [[link.node for link in c] for c in model_chains(path, {n for l in m.layers for n in l.nodes})]


def test_the_q_projection_and_the_output_projection_join_the_attention_chain(tmp_path):
    m, chains = chains_of(attention(tmp_path / "a.onnx"))
    assert chains == [["q", "s", "c", "y"]]
    # The stages line up: each tile of query tokens reads the same tokens of the previous output.
    ops = {n: l.operator for l in m.layers for n in l.nodes}
    (links,) = model_chains(tmp_path / "a.onnx", set(ops))
    (chain,) = fusable_chains(links, ops)
    assert chain.nodes == ("q", "s", "c", "y")
    assert [(s.in_rows, s.out_rows) for s in chain.stages] == [(T, T)] * 4
    assert [link.relayout for link in links] == [False, True, False, True]
    assert [link.normalizations for link in links] == [(), (), ("p",), ()] and chain.norms[2] == ("p",)


def test_relayouts_that_move_the_token_rows_end_the_chain(tmp_path):
    # Tokens moved to the last axis: a row of the scores' input is no row of the Q projection's output.
    _, chains = chains_of(attention(tmp_path / "b.onnx", q_perm=(0, 2, 3, 1)))
    assert ["q", "s"] != chains[0][:2] and ["s", "c", "y"] in chains
    # A reshape that regroups the token axis itself (T x D into 2T x D/2).
    _, chains = chains_of(attention(tmp_path / "c.onnx", q_shape=(1, 2 * T, H // 2, D // (2 * H) * 2)))
    assert all(c[:2] != ["q", "s"] for c in chains)


def test_a_normalization_along_the_rows_ends_the_chain(tmp_path):
    # Softmax over the query axis of the scores: no tile of query tokens holds what it normalizes.
    _, chains = chains_of(attention(tmp_path / "d.onnx", softmax_axis=2))
    assert all("c" not in c or "s" not in c for c in chains)


def test_the_softmax_between_two_products_is_run_alone_only_where_a_plan_cuts_there():
    import random

    from accelmap.arch.presets import get_accelerator
    from accelmap.fusion.group_cost import InnerMappings
    from accelmap.fusion.search import FusionConfig, Single, chain_front, norms_alone
    from accelmap.mapping.sampling import random_mapping
    from accelmap.workload import gemm
    from accelmap.workload.models.chains import ChainLink

    arch = get_accelerator("tpu_like")
    bits = {"I": 8, "W": 8, "O": 32}        # tpu_like's precision
    ops = {"a": gemm("a", m=8, n=6, k=4, bits=bits), "b": gemm("b", m=8, n=5, k=6, bits=bits)}
    (chain,) = fusable_chains((ChainLink("a"), ChainLink("b", row_local=True, normalizations=("sm",))), ops)
    assert chain.norms == ((), ("sm",))
    (norm,) = norms_alone(chain, arch)[1]
    # Read a's 8x6 output from off-chip memory into the innermost level holding inputs and outputs and from it,
    # write b's input there and out.
    top, store = arch.levels[0], [lv for lv in arch.levels if "I" in lv.holds and "O" in lv.holds][-1]
    per_bit = lambda lv, e: e / lv.width_bits
    rd, wr = 48 * 32, 48 * 8                # a's outputs at 32 bits, b's inputs at 8
    want = (rd * per_bit(top, top.read_energy_pj) + wr * per_bit(top, top.write_energy_pj)
            + (rd + wr) * (per_bit(store, store.read_energy_pj) + per_bit(store, store.write_energy_pj)))
    assert abs(norm.energy - want) <= 1e-9 * want and norm.offchip_bits == rd + wr
    assert norm.latency == max(rd / top.read_bw_bits, wr / top.write_bw_bits)
    rng = random.Random(0)
    inner = InnerMappings(lambda op, ar: random_mapping(op, ar, rng, check_fit=True))
    # Layers alone priced high, so that the fused pair is on the front too.
    singles = {n: Single(n, 1e12 * (i + 1), 1e9 * (i + 1), 64, 64) for i, n in enumerate(ops)}
    (alone,) = chain_front(chain, singles, arch, inner, FusionConfig(max_group=1))
    assert [c.node for c in alone.choices] == ["a", "sm", "b"]
    assert alone.energy == 3e12 + norm.energy and alone.latency == 3e9 + norm.latency
    front = chain_front(chain, singles, arch, inner, FusionConfig(row_tiles=2, per_mode=1))
    for p in front:
        cut = any(getattr(c, "node", None) == "b" for c in p.choices)
        assert any(getattr(c, "node", None) == "sm" for c in p.choices) == cut
        assert abs(p.energy - sum(c.energy for c in p.choices)) <= 1e-9 * p.energy
    assert any(not any(getattr(c, "node", None) == "sm" for c in p.choices) for p in front)


def test_a_tile_mapping_is_reused_across_store_rooms_only_where_it_fits():
    import random

    from accelmap.arch.presets import get_accelerator
    from accelmap.errors import MappingError
    from accelmap.fusion.group_cost import InnerMappings, reserved
    from accelmap.fusion.stages import mac_stage, tile_operator
    from accelmap.mapping.sampling import random_mapping
    from accelmap.mapping.validate import validate
    from accelmap.workload import conv2d

    arch = get_accelerator("tpu_like")
    ms = mac_stage(conv2d("c", c=32, h=16, w=16, k=32, r=3, s=3, padding=1, bits={"I": 8, "W": 8, "O": 32}))
    op = tile_operator(ms, 16, 16)
    roomy = reserved(arch, 0)[0]
    tight = reserved(arch, arch.levels[1].capacity_bits - arch.levels[1].capacity_bits // 64)[0]   # 1/64 left

    def fits(m, ar):
        try:
            validate(op, ar, m)
            return True
        except MappingError:
            return False

    seen = set()
    for seed in range(40):
        rng = random.Random(seed)
        calls = []

        def search(o, ar, calls=calls, rng=rng):
            calls.append(ar)
            return random_mapping(o, ar, rng, check_fit=True)

        # Found with less room first: valid with more, so reused.
        inner = InnerMappings(search, reuse_across_room=True)
        a = inner.mapping(ms, (16, 16), (16, 16), tight)
        assert inner.mapping(ms, (16, 16), (16, 16), roomy) == a and len(calls) == 1 and inner.reused == 1
        # Found with more room first: reused only where it fits the smaller room, else searched again.
        calls.clear()
        inner = InnerMappings(search, reuse_across_room=True)
        b = inner.mapping(ms, (16, 16), (16, 16), roomy)
        c = inner.mapping(ms, (16, 16), (16, 16), tight)
        small = fits(b, tight)
        assert len(calls) == (1 if small else 2) and (c == b) == small and fits(c, tight)
        seen.add(small)
        # Without reuse every room is searched.
        calls.clear()
        inner = InnerMappings(search)
        inner.mapping(ms, (16, 16), (16, 16), tight)
        inner.mapping(ms, (16, 16), (16, 16), roomy)
        assert len(calls) == 2 and inner.reused == 0
        if seen == {True, False}:
            break
    assert seen == {True, False}       # both cases drawn


def _attention_chain(tmp_path, seed: int, first: int):
    """The attention chain on tpu_like, its stages from ``first`` to the context, random tile mappings, and the K
    and V projections as producers with random mappings and their costs alone (by name)."""
    import random
    from dataclasses import replace

    from accelmap.arch.presets import get_accelerator
    from accelmap.cost.model import evaluate
    from accelmap.fusion.group_cost import InnerMappings, Producer
    from accelmap.mapping.sampling import random_mapping

    arch = get_accelerator("tpu_like")
    path = attention(tmp_path / "a.onnx")
    m = load_model(str(path), bits={"I": 8, "W": 8, "O": 32})
    ops = {n: l.operator for l in m.layers for n in l.nodes}
    (links,) = model_chains(path, set(ops))
    (chain,) = fusable_chains(links, ops)
    rng = random.Random(seed)
    inner = InnerMappings(lambda op, ar: random_mapping(op, ar, rng, check_fit=True))
    stages, macs = chain.group(first, 2)
    alone = {}
    for name in ("k", "v"):
        op = replace(ops[name], name=name)
        mp = random_mapping(op, arch, rng, check_fit=True)
        alone[name] = Producer(name, op, mp, evaluate(op, arch, mp))
    return arch, chain, stages, macs, inner, alone


def _attention_group_with_producers(tmp_path, seed=3):
    """The attention chain's scores > softmax > context on tpu_like, random tile mappings, and the K and V
    projections as producers with random mappings and their costs alone."""
    arch, chain, stages, macs, inner, alone = _attention_chain(tmp_path, seed, 1)
    return arch, chain, stages, macs, inner, {0: alone["k"], 1: alone["v"]}


def test_k_and_v_projections_leave_their_outputs_in_the_store_for_a_group_keeping_its_weights(tmp_path):
    from accelmap.cost.model import evaluate
    from accelmap.fusion.group_cost import group_cost, store_priced, transfer_energy

    arch, chain, stages, macs, inner, prods = _attention_group_with_producers(tmp_path)
    assert chain.producers == (None, "k", "v", None)          # K^T for the scores, V for the context
    policies = ("fully-cached",) * len(stages)
    base = group_cost(stages, macs, arch, T, 1, policies, inner, True)
    got = group_cost(stages, macs, arch, T, 1, policies, inner, True, produced=prods)
    assert got.producers_on_chip == ("k", "v") and base.producers_on_chip == ()
    top, st = arch.levels[0], arch.levels[1]
    operand_bits = sum(macs[j].operator.footprint(macs[j].operator.inputs[1]) * 8 for j in (0, 1))
    out_bits = sum(sum(p.result.counts[(top.name, p.operator.output.name)]) * 32 for p in prods.values())
    saved = sum(p.result.energy[(top.name, p.operator.output.name)]
                - evaluate(p.operator, store_priced(arch), p.mapping).energy[(top.name, p.operator.output.name)]
                for p in prods.values())
    # Not fetched off-chip for the group, and the producers write their outputs to the store, not off-chip.
    assert got.offchip_bits == base.offchip_bits - operand_bits - out_bits
    want = base.energy - transfer_energy(top, operand_bits, 0) - transfer_energy(st, 0, operand_bits) - saved
    assert abs(got.energy - want) <= 1e-9 * base.energy and got.latency <= base.latency
    # Without its weights resident the group fetches them per tile: the producers write off chip as before, unless
    # the group keeps the producers' outputs alone in the store (its other weights streamed): then K^T and V are
    # never fetched and the producers' writes are saved, so only the group's input and output move off chip.
    assert group_cost(stages, macs, arch, T, 1, policies, inner, False, produced=prods).producers_on_chip == ()
    for tile in (T, 3):
        streamed = group_cost(stages, macs, arch, tile, 1, policies, inner, False, produced=prods, keep_producers=True)
        assert streamed.producers_on_chip == ("k", "v") and not streamed.weights_resident
        assert streamed.offchip_bits == sum(sc.fmap_bits for sc in streamed.stages) - out_bits
        # their room is reserved next to the buffers
        assert streamed.reserved_bits >= streamed.counts.buffer_total_bits + operand_bits


def test_the_simulator_runs_k_and_v_left_in_the_store_as_the_model_prices_them(tmp_path):
    """The fused simulator runs the producers kept on chip: the group loads its resident weights without K^T and
    V (already in the store), and what the producers still move off chip plus the group's transfers equal the
    model's group (crediting the producers' saved writes) plus the producers alone. The pipeline's closed form
    over the simulator's block cycles, with that smaller resident load, is the simulated run; where every block's
    modeled cycles equal the simulator's, the group's latency does too."""
    import pytest

    from accelmap.errors import SpecError
    from accelmap.fusion.geometry import schedules
    from accelmap.fusion.group_cost import group_cost, offchip_bits, pipeline_latency, resident_weight_bits
    from accelmap.sim.fused import simulate_fused

    arch, _, stages, macs, inner, prods = _attention_group_with_producers(tmp_path)
    top = arch.levels[0].name
    policies = ("fully-cached",) * len(stages)
    operand_bits = sum(macs[j].operator.footprint(macs[j].operator.inputs[1]) * 8 for j in (0, 1))
    alone = sum(offchip_bits(p.operator, p.result, top) for p in prods.values())
    outputs = sum(offchip_bits(p.operator, p.result, top, {p.operator.output.name}) for p in prods.values())
    agreed = 0
    for tile in (T, T // 2, 3):
        g = group_cost(stages, macs, arch, tile, 1, policies, inner, True, produced=prods)
        assert not isinstance(g, str) and g.producers_on_chip == ("k", "v")
        sim = simulate_fused(stages, macs, arch, tile, 1, policies, inner, True, g.latency, producers=prods)
        plain = simulate_fused(stages, macs, arch, tile, 1, policies, inner, True)
        assert plain.weight_bits - sim.weight_bits == operand_bits
        assert sim.producer_store_bits == outputs
        assert sim.offchip_bits + sim.producer_offchip_bits == g.offchip_bits + alone
        assert sim.macs == g.counts.macs and sim.tiles == g.counts.tiles
        blocks = simulated_blocks(sim, macs)
        rows, cols = schedules(stages, tile, 1, policies)
        closed = pipeline_latency(arch.levels[0], blocks, stages, rows, cols, resident_weight_bits(macs) - operand_bits)
        assert closed == pytest.approx(sim.cycles, rel=1e-9)
        if blocks_agree(g, sim):
            assert g.latency == pytest.approx(sim.cycles, rel=1e-12)
            agreed += 1
    assert agreed >= 1
    # A group streaming its weights with the producers' outputs kept: the simulator fetches no K^T or V either.
    g = group_cost(stages, macs, arch, 3, 1, policies, inner, False, produced=prods, keep_producers=True)
    sim = simulate_fused(stages, macs, arch, 3, 1, policies, inner, False, g.latency, producers=prods)
    assert sim.weight_bits == 0 and sim.offchip_bits + sim.producer_offchip_bits == g.offchip_bits + alone
    # A store holding no weights cannot keep them: one clear line.
    from dataclasses import replace
    bare = replace(arch, levels=(arch.levels[0], replace(arch.levels[1], holds=("I", "O")))
                   + arch.levels[2:])
    with pytest.raises(SpecError, match="holds no weights"):
        simulate_fused(stages, macs, bare, T, 1, policies, inner, False, producers=prods)


def test_the_exact_tile_search_bounds_groups_with_k_and_v_in_the_store(tmp_path):
    """With the exact tile search the producers are kept too: every candidate's lower bound (cheap and with the
    certified tile bounds) stays at or below its cost with K and V left in the store, and the costed plans keep
    them."""
    from dataclasses import replace

    from accelmap.fusion.geometry import fused_counts, schedules
    from accelmap.fusion.group_cost import group_cost, group_lower_bound, producers_on_chip
    from accelmap.fusion.search import (
        EXACT_FUSION,
        SearchLog,
        _enumerate,
        group_candidates,
        group_floor,
        tile_bounds_of,
    )

    arch, chain, stages, macs, inner, prods = _attention_group_with_producers(tmp_path)
    kept = producers_on_chip(arch, prods, macs)
    assert kept.names == ("k", "v") and kept.energy_saved > 0 and kept.offchip_saved > 0
    cands = [c for c in _enumerate(stages, macs, arch, None, EXACT_FUSION, True, (), kept)
             if c.resident or c.keep_producers]
    # every tile of the 8 query tokens, weights kept or streamed with K and V kept, all heads at once or one at a time
    assert sorted((c.tile_rows, c.head_tile or H, c.resident) for c in cands) == sorted(
        (t, h, r) for t in range(1, T + 1) for h in (1, H) for r in (False, True))
    tb = tile_bounds_of(arch)
    for c in (c for c in cands if c.tile_rows in (T, 3)):          # a whole tile and an uneven one
        g = group_cost(stages, macs, arch, c.tile_rows, c.tile_cols, c.policies, inner, c.resident, produced=prods,
                       kept=kept, head_tile=c.head_tile, keep_producers=c.keep_producers)
        assert not isinstance(g, str) and g.producers_on_chip == ("k", "v") and g.head_tile == c.head_tile
        rows, cols = schedules(stages, c.tile_rows, c.tile_cols, c.policies)
        counts = fused_counts(stages, c.tile_rows, c.tile_cols, c.policies, head_tile=c.head_tile)
        tight = group_lower_bound(stages, macs, arch, counts, rows, cols, c.resident, tile_bounds=tb, kept=kept,
                                  head_tile=c.head_tile)
        for e, lat in (c.bound, tight):
            assert e <= g.energy * (1 + 1e-12) and lat <= g.latency * (1 + 1e-12)
    producers = {p.node: p for p in prods.values()}
    # (the whole exact search with all heads at once: head tiles double its tile bounds, checked above)
    found = group_candidates(chain, 1, 2, arch, inner, replace(EXACT_FUSION, head_tiles=False), SearchLog(),
                             producers=producers)
    assert any(g.producers_on_chip == ("k", "v") for g in found)
    # the floor of a group the search did not try stays below every plan of it, the producers' saving included
    floor = group_floor(stages, arch, kept)
    assert all(floor[0] <= g.energy and floor[1] <= g.latency for g in found)


def _group_from_the_q_projection(tmp_path, seed=5):
    """The attention chain's Q projection > scores > context on tpu_like (random tile mappings), the K and V
    projections as producers (random mappings), both reading x, the group's input."""
    from accelmap.fusion.search import group_producers

    arch, chain, stages, macs, inner, alone = _attention_chain(tmp_path, seed, 0)
    return arch, chain, stages, macs, inner, group_producers(chain, 0, 2, alone)


def test_k_and_v_projections_read_the_hidden_input_in_the_store_of_the_group(tmp_path):
    """A group from the Q projection holding its input (x) whole in the store before the K and V projections run
    (one tile: its tile's input; several: held until the last tile, in place of the input buffer): they read x
    there, not off chip. Credited exactly (their off-chip input reads, at the store's price instead); the
    simulator moves the same bits, the held input is reserved, and the bounds stay below."""
    from dataclasses import replace

    import pytest

    from accelmap.cost.model import evaluate
    from accelmap.fusion.geometry import fused_counts, schedules
    from accelmap.fusion.group_cost import (
        group_cost,
        group_lower_bound,
        offchip_bits,
        pipeline_latency,
        producers_on_chip,
        reserved,
        resident_weight_bits,
        store_priced,
    )
    from accelmap.fusion.search import group_floor
    from accelmap.sim.fused import simulate_fused

    arch, chain, stages, macs, inner, prods = _group_from_the_q_projection(tmp_path)
    assert chain.inputs[0] == "x" and chain.producer_inputs == (None, "x", "x", None)
    assert chain.producer_reads_input(0, 1) and not chain.producer_reads_input(1, 1)
    assert sorted(prods) == [1, 2] and all(p.reads_group_input for p in prods.values())
    top = arch.levels[0].name
    policies = ("fully-cached",) * len(stages)
    apart = {j: replace(p, reads_group_input=False) for j, p in prods.items()}
    x_bits = sum(offchip_bits(p.operator, p.result, top, {p.operator.inputs[0].name}) for p in prods.values())
    x_saved = sum(p.result.energy[(top, p.operator.inputs[0].name)]
                  - evaluate(p.operator, store_priced(arch), p.mapping).energy[(top, p.operator.inputs[0].name)]
                  for p in prods.values())
    assert x_bits >= 2 * T * D * 8 and x_saved > 0
    alone = sum(offchip_bits(p.operator, p.result, top) for p in prods.values())
    kept = producers_on_chip(arch, prods, macs)
    assert kept.input_readers == ("k", "v") and kept.input_offchip_saved == x_bits
    # weights resident and streamed with K and V kept, one tile and three
    for resident, keep, tile in ((True, False, T), (True, False, 3), (False, True, T), (False, True, 3)):
        g = group_cost(stages, macs, arch, tile, 1, policies, inner, resident, produced=prods,
                       keep_producers=keep)
        base = group_cost(stages, macs, arch, tile, 1, policies, inner, resident, produced=apart,
                          keep_producers=keep)
        assert not isinstance(g, str) and not isinstance(base, str)
        assert g.producers_on_chip == base.producers_on_chip == ("k", "v")
        one = g.counts.tiles == 1
        assert g.input_readers == ("k", "v") and base.input_readers == ()
        assert g.input_held == (not one) and not base.input_held
        # held, the whole input (T x D at 8 bits) is reserved in place of a tile's input buffer
        want = g.counts.buffer_total_bits + (resident_weight_bits(macs) if resident else kept.operand_total)
        got = reserved(arch, want + (0 if one else T * D * 8 - g.counts.buffer_bits[0]))
        assert got is not None and g.reserved_bits == got[1]
        assert g.offchip_bits == base.offchip_bits - x_bits
        assert abs(g.energy - (base.energy - x_saved)) <= 1e-9 * abs(base.energy)
        sim = simulate_fused(stages, macs, arch, tile, 1, policies, inner, resident, g.latency, producers=prods,
                             input_held=g.input_held)
        assert sim.producer_input_store_bits == x_bits
        assert sim.offchip_bits + sim.producer_offchip_bits == g.offchip_bits + alone
        counts = fused_counts(stages, tile, 1, policies)
        rows, cols = schedules(stages, tile, 1, policies)
        # the pipeline over the simulator's block cycles is its run: the held input loaded before the first block
        closed = pipeline_latency(arch.levels[0], simulated_blocks(sim, macs), stages, rows, cols,
                                  resident_weight_bits(macs) - kept.operand_total if resident else 0,
                                  input_held_bits=0 if one else T * D * 8)
        assert closed == pytest.approx(sim.cycles, rel=1e-12)
        if blocks_agree(g, sim):
            assert g.latency == pytest.approx(sim.cycles, rel=1e-12)
        low_e, _ = group_lower_bound(stages, macs, arch, counts, rows, cols, resident, kept=kept)
        assert low_e <= g.energy
        assert group_floor(stages, arch, kept)[0] <= g.energy
