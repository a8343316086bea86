"""Fused groups in the network program (``accelmap compile --fuse``).

The fusion search (``fusion.model_fusion.fuse_model``) cuts the model's chains into groups of
operators that share one tile loop, each with its tile and halo policy, on top of the layer-by-layer
mapping. Here each chosen group is matched to the program's steps: its operators' accelerator steps
and the host steps between them (the requantization, dequantization, activation and quantization of
a QDQ model; a max or average pool when the group has a pooling window). A group becomes one fused step: the
tile loop of ``codegen.fused_c`` with every operator's block followed by those host steps on the
block (its *epilogue*), intermediate tensors in on-chip buffers, halos as the plan chose. It runs
where its last operator ran; the steps it covers run nowhere else.

A group that ends in its chain's residual join (the plan prices the add inside the tile loop, its skip
kept on chip or re-read per tile) covers the join's step too: the add of a QDQ model (``Add (QDQ)``,
onnxruntime's QLinearAdd) or of a float model, after the last operator's epilogue, on each output block;
the group then runs where the join ran (a skip from outside the group, a projection shortcut, is computed
by then) and writes the join's output.

Matrix products (a feed-forward chain, float or int8 QDQ, MatMuls or Gemms without transA; attention's float batched
products per head, whose second operand is a tensor computed before the group runs) are fused along their rows
(tokens) the same way, their tensors token-major in memory (``codegen.fused_c.product_batch``); a bias or scale (a
constant per channel or a scalar) and a softmax over the features run on their blocks, and the reshapes and
transposes of the heads' split and merge between a projection and the heads' products are no work on chip
(``_check_relayout``): FLAT's chain from the Q projection to the output projection is one group.

The search itself (``fuse_network``) sees the graph's shapes and cuts the chains after every host step a block
cannot run (a layer norm over anything but a matrix product's features, a pool neither max nor float average):
``accelmap map --fuse`` searches such groups, the program could not run them fused. A pre-LN (or post-LN)
transformer's link from attention to its feed-forward network runs: the add of the layer's input, a tensor no
operator of the group computes (the fusion model leaves it to the host, as without fusion), reads it from memory
at each block's positions (``InnerJoinPlan.host``, counted apart), and the layer norm over the features runs on
the block, which holds every feature of its tokens.

A group is run layer by layer instead, with the reason stated, when its program cannot be written:
an operator that is not a single-image 2-D convolution or a matrix product of that form, a host step
between two operators that a block cannot run (``host_ops.BLOCK_OPS``, ``BLOCK_CONST_OPS``, a softmax over
the features) or a pool that is neither a max pool nor a float average pool (``pool_kind``), a value on the way
that another step or a graph output reads, or a join whose add is not one of the program's (a broadcast
add, an add of a skip that is an intermediate of the group) or whose skip is re-read but not in memory.
"""

from __future__ import annotations

import dataclasses
import itertools
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from accelmap.arch.accelerator import Accelerator
from accelmap.codegen.fused_blocks import BlockPrograms, block_level_counts, plan_block_programs
from accelmap.codegen.fused_c import conv_shape, is_matrix_product
from accelmap.codegen.fused_weights import WeightTransfers, plan_weight_transfers
from accelmap.compile.graph import NetGraph
from accelmap.compile.host_ops import (
    BLOCK_CONST_OPS,
    BLOCK_OPS,
    HostWork,
    block_constant,
    block_gemm_bias,
    block_layernorm,
    block_softmax,
)
from accelmap.compile.partition import Step, q_range
from accelmap.errors import SpecError
from accelmap.fusion.geometry import Join, Stage, schedules
from accelmap.fusion.group_cost import GroupCost, InnerMappings, Producer, offchip_bits, store_index
from accelmap.fusion.model_fusion import FusedModel, fuse_model, mapper_search, model_producers
from accelmap.fusion.search import DEFAULT_FUSION, FusionConfig, group_producers
from accelmap.fusion.stages import MacStage
from accelmap.search.model_result import ModelMapping
from accelmap.sim.fused import FusedSimResult
from accelmap.workload.models.chains import model_chains
from accelmap.workload.onnx_ops import attrs

POOL_OPS = ("MaxPool", "AveragePool")
RELAYOUT_OPS = ("Reshape", "Transpose")


@dataclass(frozen=True)
class InnerJoinPlan:
    """A residual add inside a group (it spans two residual blocks): run on the block of the tensor it adds to,
    then the host steps after it (``after``: e.g. the block's ReLU), whose result the next stage reads."""

    tensor: int                # the group's tensor it adds to (``Join.at``)
    step: int                  # the add's step
    skip: str                  # its skip value
    chain_first: bool          # the group's value is the add's first input, the skip its second
    after: tuple[int, ...]     # host steps after the add, run on the block
    # an add the plan has no join for, which the fusion model leaves to the host (a pre-LN transformer's attention
    # output plus the layer's input: its skip is a tensor no operator of the group computes, read from memory)
    host: bool = False


@dataclass
class FusedGroup:
    """One fused group as the program runs it."""

    index: int
    cost: GroupCost
    stages: tuple[Stage, ...]
    macs: dict[int, MacStage]
    step_of: dict[int, int]                   # stage index of an operator -> its step index
    epilogues: dict[int, tuple[int, ...]]     # stage index -> the host steps (indices) run on its blocks after it
    members: tuple[int, ...]                  # every step it covers
    input: str                                # the value it reads from memory
    output: str                               # the value it writes
    at: int                                   # the step index where it runs (its last operator's)
    join_step: int | None = None              # the residual add's step (the group ends with it), if any
    skip: str | None = None                   # the join's skip value
    join_chain_first: bool = True             # the group's value is the add's first input (A), the skip its second
    channel_axis: int = 1                     # of its tensors: 1 (convolutions, NCHW), -1 (matrix products)
    sim: FusedSimResult | None = None
    host_work: HostWork = field(default_factory=HostWork)
    counters_ok: bool | None = None           # the program's counters equal to the fusion model's
    inner: tuple[InnerJoinPlan, ...] = ()     # residual adds inside the group, by tensor
    pools: dict[int, str] = field(default_factory=dict)   # pooling stage -> how it pools (``codegen.fused_c.POOLS``)
    produced: dict[int, Producer] = field(default_factory=dict)   # stage -> the producer kept in the store for it
    weights: WeightTransfers | None = None    # how its C moves the weights (``codegen.fused_weights``)
    # its blocks' tile programs (``codegen.fused_blocks``; None: plain loops) and the model's counters per level of
    # them by stage, and whether the program's equal them
    programs: BlockPrograms | None = None
    level_counts: dict[int, np.ndarray] = field(default_factory=dict)
    level_counters_ok: bool | None = None

    @property
    def name(self) -> str:
        return f"fused_{self.index}"

    @property
    def label(self) -> str:
        j = self.cost.join
        after = {jn.target(len(self.stages)) - 1: f" + {jn.name} inside (skip {sp})" for jn, sp in self.cost.inner_joins}
        return (" -> ".join(st.name + after.get(k, "") for k, st in enumerate(self.stages))
                + (f" + {j.name} (skip {self.cost.skip_policy})" if j else ""))

    def producers_alone_bits(self, top: str) -> int:
        """Off-chip bits of the producers the group keeps in the store, as each runs alone (the model credits what
        keeping them saves to the group, so the group's bits plus these are the simulator's group plus producers)."""
        return sum(offchip_bits(p.operator, p.result, top) for p in self.produced.values())

    @property
    def has_joins(self) -> bool:
        """Whether it runs joins the plan charges (a skip counter in its C)."""
        return self.join_step is not None or any(not x.host for x in self.inner)

    @property
    def host_adds(self) -> tuple[InnerJoinPlan, ...]:
        """The adds inside it the fusion model leaves to the host (``InnerJoinPlan.host``)."""
        return tuple(x for x in self.inner if x.host)

    def computed(self, stage: int) -> int:
        """Elements of stage ``stage``'s output the tile loop computes, recomputed halos included."""
        c = self.cost
        rows, cols = schedules(self.stages, c.tile_rows, c.tile_cols, c.policies, c.join, c.skip_policy or "re-read",
                               c.inner_joins)
        return rows.computed_total(stage + 1) * cols.computed_total(stage + 1) * self.stages[stage].out_depth


def fuse_network(g: NetGraph, mm: ModelMapping, objective: str, tile_time_limit: float,
                 time_limit: float | None, config: FusionConfig = DEFAULT_FUSION,
                 steps: list[Step] | None = None
                 ) -> tuple[FusedModel, InnerMappings, list[str], dict[str, Producer]]:
    """The fusion search on the compiled model (its graph written to a temporary file for the chain finder);
    returns the plan, the tile mappings it used (the simulator reuses them), notes on what the program
    cannot run that ``accelmap map --fuse`` would search, and the operators whose outputs a group may keep in the
    store (attention's K and V projections, ``fusion.model_fusion.model_producers``; ``plan_groups`` takes them). With the program's ``steps``, the chains are cut after
    every host step a fused block cannot run (``_cuts``), so that the plan holds no group the program would run
    layer by layer for that reason."""
    store_index(mm.arch)          # an accelerator without a shared on-chip store: one clear line
    inner = InnerMappings(mapper_search(objective, tile_time_limit))
    model = onnx.ModelProto()
    model.CopyFrom(g.model)
    # The chain finder reads the graph and its shapes, not the weights: each initializer becomes an input of its type
    # and shape, except a reshape's target shape (a small int64 initializer), whose values shape inference needs to
    # see the heads' split and merge (a link between two matrix products through them).
    kept = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT64 and len(t.dims) <= 1]
    named = {i.name for i in model.graph.input}
    model.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                             for t in model.graph.initializer if t.name not in named and t not in kept)
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    cuts = _cuts(steps, g) if steps is not None else []
    operators = {n for lm in mm.layers for n in lm.layer.nodes}
    with tempfile.TemporaryDirectory(prefix="accelmap-fuse-") as td:
        path = Path(td) / "graph.onnx"
        links: set[tuple[str, str]] = set()
        if cuts:
            onnx.save(model, path)
            links = _linked_pairs(path, operators)
        # a value the graph also outputs has a second reader: the chain finder links no operator through it
        model.graph.output.extend(onnx.helper.make_tensor_value_info(v, g.types[v], list(g.shape(v))) for v in cuts)
        onnx.save(model, path)
        lost = sorted(links - _linked_pairs(path, operators)) if cuts else []
        mm_file = dataclasses.replace(mm, model=dataclasses.replace(mm.model, source=str(path)))
        # The program tiles attention over heads as the plan says (``codegen.fused_c``): head tiles are searched.
        fm = fuse_model(mm_file, objective=objective, config=config, tile_time_limit=tile_time_limit,
                        time_limit=time_limit, inner=inner)
        producers = model_producers(mm_file, fm.chains) if config.producers_on_chip else {}
    notes: list[str] = []
    if lost:
        notes.append(f"no fused group spans {', '.join(f'{a} > {b}' for a, b in lost)}: a step between them is one a "
                     "fused block cannot run (`accelmap map --fuse` searches such groups)")
    return fm, inner, notes, producers


def _linked_pairs(path: Path, operators: set[str]) -> set[tuple[str, str]]:
    """The consecutive operators the chain finder links in the graph saved at ``path``."""
    return {(a.node, b.node) for chain in model_chains(path, operators) for a, b in itertools.pairwise(chain)}


def _cuts(steps: list[Step], g: NetGraph) -> list[str]:
    """The outputs of the host steps a fused block cannot run (``_check_block_step``; a pool ``pool_kind`` refuses;
    an add of a value and a tensor no operator computed, which is no residual join), in step order. Reshapes and transposes are
    checked where a group is planned (``_check_relayout``); a residual join (an add of two operators' results) by
    ``_plan_join``."""
    producer = {o: i for i, s in enumerate(steps) for o in s.outputs}
    from_operator: dict[str, bool] = {}

    def computed(v: str) -> bool:
        """Whether an accelerator step's output reaches ``v``."""
        if v not in from_operator:
            p = producer.get(v)
            from_operator[v] = p is not None and (steps[p].placement == "accelerator" or any(
                computed(x) for x in steps[p].inputs if x not in g.consts))
        return from_operator[v]
    cuts: list[str] = []
    for s in steps:
        if s.placement != "host" or s.op_type in RELAYOUT_OPS:
            continue
        ins = [x for x in s.inputs if x not in g.consts]
        if len(ins) > 1:
            # a residual join (two computed values), or an add of a tensor in memory (no operator computed it,
            # as a pre-LN transformer's attention output plus the layer's input), read at each block's positions
            runs = (s.op_type in ("Add", "Add (QDQ)") and len(ins) == 2 and any(map(computed, ins))
                    and all(x in g.shapes and g.shape(x) == g.shape(ins[0]) for x in (*ins, *s.outputs)))
        elif s.op_type in POOL_OPS:
            try:
                runs = bool(pool_kind(s, g))
            except SpecError:
                runs = False
        else:
            runs = False
            for axis in (1, -1):
                try:
                    _check_block_step(s, g, axis)
                    runs = True
                except SpecError:
                    pass
        if not runs:
            cuts += [o for o in s.outputs if o in g.types and o in g.shapes and o not in g.outputs]
    return cuts


def plan_groups(fm: FusedModel, steps: list[Step], g: NetGraph,
                producers: dict[str, Producer] | None = None, arch: Accelerator | None = None,
                inner: InnerMappings | None = None) -> tuple[list[FusedGroup], list[str]]:
    """The groups of ``fm``'s plan that the program runs fused, and a note for each one it does not. A group that
    keeps producers' outputs in the store (``GroupCost.producers_on_chip``, from ``producers``) gets them by stage
    (``FusedGroup.produced``) for the simulator. With ``arch`` and the tile mappings ``inner`` the search used,
    each group gets its weights' transfers (``FusedGroup.weights``: resident, or each block's fetches as its tile
    mapping moves them)."""
    at = {s.name: i for i, s in enumerate(steps) if s.placement == "accelerator"}
    producer = {o: i for i, s in enumerate(steps) for o in s.outputs}
    readers: dict[str, int] = {}
    for s in steps:
        for x in s.inputs:
            readers[x] = readers.get(x, 0) + 1
    groups: list[FusedGroup] = []
    notes: list[str] = []
    for gc in fm.groups:
        try:
            grp = _plan(len(groups), gc, fm, steps, g, at, producer, readers, producers or {})
            if arch is not None and inner is not None:
                grp.weights = plan_weight_transfers(grp.name, grp.stages, grp.macs, arch, gc, inner,
                                                    frozenset(grp.produced),
                                                    {j: steps[grp.step_of[j]].dtype for j in grp.macs})
                progs = plan_block_programs(grp.name, grp.stages, grp.macs, arch, gc, inner,
                                            {j: steps[grp.step_of[j]].dtype for j in grp.macs})
                for j in list(progs.programs):
                    why = _operand_misfit(steps[grp.step_of[j]], grp.macs[j], g)
                    if why:
                        progs = progs.without(j, why)
                if progs.programs:
                    grp.programs = progs
                    model = block_level_counts(grp.name, grp.stages, grp.macs, arch, gc, inner)
                    grp.level_counts = {j: model[j] for j in progs.programs}
                notes += [f"fused group {' -> '.join(gc.names)}: {why}, its blocks run plain loops, not their "
                          "tile programs" for why in progs.plain.values()]
            groups.append(grp)
        except SpecError as e:
            notes.append(f"fused group {' -> '.join(gc.names)} runs layer by layer: {e}")
    return groups, notes


def _plan(index: int, gc: GroupCost, fm: FusedModel, steps: list[Step], g: NetGraph, at: dict[str, int],
          producer: dict[str, int], readers: dict[str, int], producers: dict[str, Producer]) -> FusedGroup:
    chain = next((c for c in fm.chains if gc.names[0] in c.nodes and gc.names[-1] in c.nodes), None)
    if chain is None:
        raise SpecError("its operators are not one chain of the plan")
    stages, macs = chain.group(chain.nodes.index(gc.names[0]), chain.nodes.index(gc.names[-1]))
    if tuple(st.name for st in stages) != gc.names:
        raise SpecError(f"its stages {gc.names} are not those of its chain")
    step_of: dict[int, int] = {}
    for j, ms in macs.items():
        if ms.operator.name not in at:
            raise SpecError(f"operator {ms.operator.name} is no accelerator step of the program")
        s = steps[at[ms.operator.name]]
        if s.node.op_type in ("MatMul", "Gemm") and is_matrix_product(ms):
            # the second operand, a constant or a value computed before the group runs (attention's K^T, V),
            # is read from memory like a weight; an integer product's weight is a constant (partition.py)
            pass
        elif s.node.op_type != "Conv":
            raise SpecError(f"{s.name} is a {s.node.op_type}; fused tiles run convolutions, MatMuls (batched per "
                            "head too, no broadcast operand) and Gemms without transA")
        conv_shape(ms)
        if s.node.op_type == "Gemm" and s.dtype == "fp32" and len(s.node.input) > 2 and s.node.input[2]:
            block_gemm_bias(s, g)
        step_of[j] = at[ms.operator.name]
    axis = -1 if any(is_matrix_product(ms) for ms in macs.values()) else 1
    order = sorted(macs)
    epilogues: dict[int, list[int]] = {j: [] for j in range(len(stages))}
    members: list[int] = []
    step_at = {s.name: i for i, s in enumerate(steps)}
    inner_at = {jn.at: (jn, sp) for jn, sp in gc.inner_joins}
    # an intermediate kept as a later add's skip is read by that add too
    also_read = {steps[step_of[jn.skip]].inputs[0]: jn.name
                 for jn, sp in (*gc.inner_joins, *(((gc.join, gc.skip_policy),) if gc.join else ()))
                 if sp == "kept" and jn.skip and jn.skip in step_of}
    inner: list[InnerJoinPlan] = []
    pools: dict[int, str] = {}
    for a, b in zip(order, order[1:], strict=False):
        path: list[int] = []
        v = steps[step_of[b]].inputs[0]
        while True:
            extra = 1 if also_read.get(v) in step_at and v in steps[step_at[also_read[v]]].inputs else 0
            if v in g.outputs or readers.get(v, 0) != 1 + extra:
                raise SpecError(f"value {v!r} is read outside the group")
            p = producer.get(v)
            if p is None:
                raise SpecError(f"value {v!r} is not computed by the program")
            if p == step_of[a]:
                break
            hs = steps[p]
            if b in inner_at and hs.name == inner_at[b][0].name and not any(x.step == p for x in inner):
                # the residual add inside the group: the steps after it run on its block, then the walk goes on
                # from its operand that the group computes
                jn, sp = inner_at[b]
                group_input = steps[step_of[order[0]]].inputs[0]
                skip, chain_first = _add_operands(hs, jn, g, steps, producer, step_of[a])
                _check_skip(jn, sp, skip, group_input, steps, step_of, producer, g)
                path.reverse()
                for q in path:
                    _check_block_step(steps[q], g, axis)
                inner.append(InnerJoinPlan(b, p, skip, chain_first, tuple(path)))
                members += [p, *path]
                path = []
                v = hs.inputs[0 if chain_first else 1]
                continue
            if b in inner_at and not any(x.tensor == b for x in inner) and hs.op_type in ("Add (QDQ)", "Add"):
                raise SpecError(f"the add {hs.name} between {stages[a].name} and {stages[b].name} is not the join "
                                f"{inner_at[b][0].name} the plan runs inside the group")
            ins = [x for x in hs.inputs if x not in g.consts]
            if (b not in inner_at and not any(x.tensor == b for x in inner) and hs.placement == "host"
                    and hs.op_type in ("Add (QDQ)", "Add") and len(ins) == 2):
                # an add the plan has no join for (the model leaves it to the host): its skip is read from memory
                # at each block's positions, then the steps after it run on the block, as for a join inside
                skip, chain_first = _add_operands(hs, Join(hs.name, None, 0), g, steps, producer, step_of[a])
                sp_at = producer.get(skip)
                if sp_at is not None and sp_at >= step_of[order[0]]:
                    raise SpecError(f"the add {hs.name} reads {skip!r}, which is computed after the group starts")
                path.reverse()
                for q in path:
                    _check_block_step(steps[q], g, axis)
                inner.append(InnerJoinPlan(b, p, skip, chain_first, tuple(path), host=True))
                members += [p, *path]
                path = []
                v = hs.inputs[0 if chain_first else 1]
                continue
            if hs.placement != "host" or len(ins) != 1:
                raise SpecError(f"step {hs.name} ({hs.op_type}) between {stages[a].name} and {stages[b].name} "
                                "is not a host step of one non-constant input")
            path.append(p)
            v = ins[0]
        path.reverse()
        if any(steps[p].op_type in RELAYOUT_OPS for p in path):
            _check_relayout(steps, path, step_of[a], steps[step_of[b]].inputs[0], g, axis)
        cur = a
        for p in path:
            hs = steps[p]
            if hs.op_type in RELAYOUT_OPS:
                continue        # the same block on chip (``_check_relayout``): no lines
            if hs.op_type in POOL_OPS:
                cur += 1
                if cur >= b or stages[cur].name != hs.node.name:
                    raise SpecError(f"step {hs.name} ({hs.op_type}) is not the group's pooling stage")
                pools[cur] = pool_kind(hs, g)
                continue
            _check_block_step(hs, g, axis)
            epilogues[cur].append(p)
        if cur != b - 1:
            raise SpecError(f"the pooling stages between {stages[a].name} and {stages[b].name} are not the "
                            "program's")
        if b in inner_at and not any(x.tensor == b for x in inner):
            raise SpecError(f"the join {inner_at[b][0].name} inside the group is not between {stages[a].name} and "
                            f"{stages[b].name} in the program")
        members += [step_of[a], *path]
    members.append(step_of[order[-1]])
    for j in order:       # a computed second operand is read from memory: it must not be one of the group's values
        wv = steps[step_of[j]].node.input[1]
        if producer.get(wv) in members:
            raise SpecError(f"{stages[j].name} multiplies by {wv!r}, which the group itself computes")
    first, last = steps[step_of[order[0]]], steps[step_of[order[-1]]]
    x = first.inputs[0]
    if g.size(x) != stages[0].in_depth * stages[0].in_rows * stages[0].in_cols:
        raise SpecError(f"its input {x!r} has {g.size(x)} elements, the first stage reads "
                        f"{stages[0].in_depth * stages[0].in_rows * stages[0].in_cols}")
    if order[-1] != len(stages) - 1:
        raise SpecError(f"it ends with the pooling stage {stages[-1].name}")
    grp = FusedGroup(index, gc, stages, macs, step_of, {j: tuple(v) for j, v in epilogues.items()},
                     tuple(sorted(members)), x, last.outputs[0], step_of[order[-1]], channel_axis=axis,
                     inner=tuple(sorted(inner, key=lambda x: x.tensor)), pools=pools)
    if gc.join is not None:
        _plan_join(grp, steps, g, producer, readers)
    if gc.producers_on_chip:
        grp.produced = _kept_producers(gc, chain, producers, grp, steps, g, producer)
    return grp


def _operand_misfit(s: Step, ms: MacStage, g: NetGraph) -> str:
    """Why an integer product's quantized input less its zero point does not fit its tile program's input operand
    (as the layer programs check it); empty when it fits or the product is float."""
    if s.dtype != "int" or s.qin is None:
        return ""
    X = ms.operator.inputs[0]
    zp = int(s.qin.zero_point[0])
    qlo, qhi = q_range(s.qin.elem)
    if qlo - zp < -(1 << (X.bits - 1)) or qhi - zp > (1 << (X.bits - 1)) - 1:
        return (f"{ms.operator.name}'s quantized input less its zero point ({qlo - zp}..{qhi - zp}) does not fit its "
                f"{X.bits}-bit operand")
    return ""


def _kept_producers(gc: GroupCost, chain, producers: dict[str, Producer], grp: FusedGroup, steps: list[Step],
                    g: NetGraph, producer: dict[str, int]) -> dict[int, Producer]:
    """The producers the plan keeps in the store for ``grp``, by stage: each an accelerator step of the program
    running before the group, whose output alone reaches the second operand of that stage's operator (through
    single-reader host steps: its bias, the heads' reshape and transpose), as the chain finder found it. The program
    computes them as before, into the buffer standing for the store, and the group reads them from there; their
    cost is theirs, the group's is credited with the writes and fetches saved (``fusion.group_cost``)."""
    missing = [n for n in gc.producers_on_chip if n not in producers]
    if missing:
        raise SpecError(f"the plan keeps {', '.join(missing)} in the store, which the search did not report as "
                        "producers")
    ops = [n for n in gc.names if n in chain.nodes]
    produced = group_producers(chain, chain.nodes.index(ops[0]), chain.nodes.index(ops[-1]),
                               {n: producers[n] for n in gc.producers_on_chip})
    for j, p in produced.items():
        wv = steps[grp.step_of[j]].node.input[1]
        at = producer.get(wv)
        while at is not None and steps[at].name != p.node and steps[at].placement == "host":
            ins = [x for x in steps[at].inputs if x not in g.consts]
            at = producer.get(ins[0]) if len(ins) == 1 else None
        if at is None or steps[at].name != p.node or steps[at].placement != "accelerator" or at > grp.at:
            raise SpecError(f"{grp.stages[j].name}'s second operand {wv!r} is not {p.node}'s output in the program")
    return produced


def _plan_join(grp: FusedGroup, steps: list[Step], g: NetGraph, producer: dict[str, int],
               readers: dict[str, int]) -> None:
    """Extend ``grp`` to its join: the element-wise host steps from its last operator's output to the residual
    add (run on the last block, like the epilogue), then the add, which the group now ends with."""
    join, policy = grp.cost.join, grp.cost.skip_policy
    assert join is not None
    if policy not in ("kept", "re-read"):
        raise SpecError(f"skip policy {policy!r} of {join.name}")
    v = grp.output
    path: list[int] = []
    while True:
        if v in g.outputs or readers.get(v, 0) != 1:
            raise SpecError(f"value {v!r} before the residual add {join.name} is read outside the group")
        nxt = next((i for i, s in enumerate(steps) if v in s.inputs), None)
        if nxt is None:
            raise SpecError(f"value {v!r} is read by no step")
        s = steps[nxt]
        if s.name == join.name:
            break
        if s.placement != "host" or len([x for x in s.inputs if x not in g.consts]) != 1:
            raise SpecError(f"step {s.name} ({s.op_type}) between {grp.stages[-1].name} and the residual add "
                            f"{join.name} is not a host step of one non-constant input")
        _check_block_step(s, g, grp.channel_axis)
        path.append(nxt)
        v = s.outputs[0]
    add = steps[nxt]
    if add.op_type not in ("Add (QDQ)", "Add") or len(add.inputs) != 2:
        raise SpecError(f"the residual add {join.name} runs as {add.op_type}; a fused tile runs an Add of two "
                        "tensors (float, or QDQ as onnxruntime's QLinearAdd)")
    out = add.outputs[0]
    if not g.shape(add.inputs[0]) == g.shape(add.inputs[1]) == g.shape(out):
        raise SpecError(f"the residual add {join.name} broadcasts; a fused tile adds tensors of one shape")
    if add.op_type == "Add" and not all(g.c_type(t) == "float" for t in (*add.inputs, out)):
        raise SpecError(f"the residual add {join.name} is not float nor a QDQ add")
    first = add.inputs.index(v) == 0
    skip = add.inputs[1 if first else 0]
    _check_skip(join, policy, skip, grp.input, steps, grp.step_of, producer, g)
    for p in path:
        grp.epilogues[len(grp.stages) - 1] += (p,)
    grp.members = tuple(sorted((*grp.members, *path, nxt)))
    grp.join_step, grp.skip, grp.join_chain_first = nxt, skip, first
    grp.output, grp.at = out, nxt


def _check_skip(join, policy: str, skip: str, group_input: str, steps: list[Step], step_of: dict[int, int],
                producer: dict[str, int], g: NetGraph) -> None:
    """The add's skip value is what the plan says: computed outside the group (re-read), the group's input, or
    an intermediate of the group (kept on chip: it is never written to memory)."""
    if join.skip is None:
        if producer.get(skip) is None and skip not in g.inputs:
            raise SpecError(f"the skip {skip!r} of {join.name} is not computed by the program")
    elif join.skip == 0:
        if skip != group_input:
            raise SpecError(f"the skip {skip!r} of {join.name} is not the group's input {group_input!r}")
    else:
        if join.skip not in step_of or steps[step_of[join.skip]].inputs[0] != skip:
            raise SpecError(f"the skip {skip!r} of {join.name} is not the group's tensor {join.skip}")
        if policy != "kept":
            raise SpecError(f"the skip of {join.name} is the group's intermediate tensor {join.skip}, never in "
                            "memory; it can only be kept")


def _add_operands(add: Step, join, g: NetGraph, steps: list[Step], producer: dict[str, int],
                  chain_from: int) -> tuple[str, bool]:
    """(the skip value, whether the group's value is the add's first input) of a residual add inside a group: its
    operand that the group computes (through single-input host steps from step ``chain_from``) and the other."""
    if add.op_type not in ("Add (QDQ)", "Add") or len(add.inputs) != 2:
        raise SpecError(f"the residual add {join.name} runs as {add.op_type}; a fused tile runs an Add of two "
                        "tensors (float, or QDQ as onnxruntime's QLinearAdd)")
    if not g.shape(add.inputs[0]) == g.shape(add.inputs[1]) == g.shape(add.outputs[0]):
        raise SpecError(f"the residual add {join.name} broadcasts; a fused tile adds tensors of one shape")
    if add.op_type == "Add" and not all(g.c_type(t) == "float" for t in (*add.inputs, add.outputs[0])):
        raise SpecError(f"the residual add {join.name} is not float nor a QDQ add")

    def from_chain(v: str) -> bool:
        for _ in range(len(steps)):
            p = producer.get(v)
            if p is None:
                return False
            if p == chain_from:
                return True
            ins = [x for x in steps[p].inputs if x not in g.consts]
            if steps[p].placement != "host" or len(ins) != 1:
                return False
            v = ins[0]
        return False
    chained = [from_chain(v) for v in add.inputs]
    if chained.count(True) != 1:
        raise SpecError(f"the residual add {join.name}: not exactly one of its inputs comes from the group's block")
    first = chained[0]
    return add.inputs[1 if first else 0], first


def _check_relayout(steps: list[Step], path: list[int], first: int, value: str, g: NetGraph,
                    channel_axis: int) -> None:
    """The reshapes and transposes on ``path`` (host steps from operator step ``first``'s output to ``value``, the
    next operator's input) leave every element at its token and on-chip channel: the token is the second-to-last
    axis of both products' tensors, the channel every other axis in order (a product's batch, then its features),
    so the heads' split ``[.., tokens, heads, width]`` -> ``[.., heads, tokens, width]`` and their merge keep feature
    ``h * width + x`` as head h's x. Checked on the elements' positions, by NumPy. Then the block needs no lines for
    them; one clear line otherwise."""
    if channel_axis != -1:
        raise SpecError("a reshape or transpose between two convolutions; fused tiles run one only between matrix "
                        "products")
    src = steps[first].outputs[0]
    shape = g.shape(src)
    if len(shape) < 2 or len(g.shape(value)) < 2:
        raise SpecError(f"a reshape or transpose between {src!r} and {value!r}, one of them without token rows")
    at = np.arange(int(np.prod(shape))).reshape(shape)
    for p in path:
        hs = steps[p]
        if hs.op_type == "Reshape":
            at = at.reshape(g.shape(hs.outputs[0]))
        elif hs.op_type == "Transpose":
            perm = attrs(hs.node).get("perm")
            at = at.transpose([int(x) for x in perm] if perm is not None else None)
        elif g.shape(hs.outputs[0]) != at.shape:
            raise SpecError(f"step {hs.name} ({hs.op_type}) between two matrix products changes the shape")

    def token_major(a: np.ndarray) -> np.ndarray:
        return np.moveaxis(a, a.ndim - 2, 0).reshape(a.shape[-2], -1)
    if at.shape != tuple(g.shape(value)) or at.shape[-2] != shape[-2] or not (token_major(at) ==
                                                                              token_major(np.arange(at.size).reshape(
                                                                                  shape))).all():
        raise SpecError(f"the reshapes and transposes from {src!r} {list(shape)} to {value!r} "
                        f"{list(g.shape(value))} move elements between tokens or channels; a fused block keeps them")


def pool_kind(s: Step, g: NetGraph) -> str:
    """How a pooling step inside a group pools (``codegen.fused_c.POOLS``): a max pool (any element type: it
    compares), or a float average pool over the taps inside the input or, with count_include_pad, the whole window;
    one clear line otherwise."""
    if s.op_type == "MaxPool":
        return "max"
    a = attrs(s.node)
    if s.op_type != "AveragePool" or a.get("ceil_mode", 0) or any(d != 1 for d in a.get("dilations", [1, 1])):
        raise SpecError(f"step {s.name} ({s.op_type}) is no max pool nor an average pool without ceil mode or "
                        "dilation")
    if not all(g.c_type(v) == "float" for v in (s.inputs[0], s.outputs[0])):
        raise SpecError(f"step {s.name} (AveragePool) averages {g.c_type(s.inputs[0])} values; a fused tile "
                        "averages floats (a quantized model's pool between DequantizeLinear and QuantizeLinear)")
    return "avg-pad" if a.get("count_include_pad", 0) else "avg"


def _check_block_step(s: Step, g: NetGraph, channel_axis: int) -> None:
    """One clear line when a fused block cannot run the host step ``s`` (``host_ops.block_lines``)."""
    if s.op_type in BLOCK_CONST_OPS:
        block_constant(s, g, channel_axis)
    elif s.op_type in ("Softmax", "Softmax (QDQ)"):
        block_softmax(s, g, channel_axis)
    elif s.op_type == "LayerNormalization":
        block_layernorm(s, g, channel_axis)
    elif s.op_type not in BLOCK_OPS:
        raise SpecError(f"step {s.name} ({s.op_type}) is not element-wise; a fused tile runs "
                        f"{', '.join(sorted(BLOCK_OPS))}, a float {', '.join(BLOCK_CONST_OPS)} with a constant per "
                        "channel, a float Softmax over the channels of a matrix product, and max or float average pooling")
