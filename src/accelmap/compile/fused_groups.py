"""Fused groups in the network program (``accelmap compile --fuse``).

The fusion search (``fusion.model_fusion.fuse_model``) cuts the model's chains into groups of
operators that share one tile loop, each with its tile and halo policy, on top of the layer-by-layer
mapping. Here each chosen group is matched to the program's steps: its operators' accelerator steps
and the host steps between them (the requantization, dequantization, activation and quantization of
a QDQ model; a max pool when the group has a pooling window). A group becomes one fused step: the
tile loop of ``codegen.fused_c`` with every operator's block followed by those host steps on the
block (its *epilogue*), intermediate tensors in on-chip buffers, halos as the plan chose. It runs
where its last operator ran; the steps it covers run nowhere else.

A group that ends in its chain's residual join (the plan prices the add inside the tile loop, its skip
kept on chip or re-read per tile) covers the join's step too: the add of a QDQ model (``Add (QDQ)``,
onnxruntime's QLinearAdd) or of a float model, after the last operator's epilogue, on each output block;
the group then runs where the join ran (a skip from outside the group, a projection shortcut, is computed
by then) and writes the join's output.

Matrix products (a feed-forward chain, float or int8 QDQ; attention's float batched products per head, whose
second operand is a tensor computed before the group runs) are fused along their rows (tokens) the same way, their tensors
token-major in memory (``codegen.fused_c.product_batch``); a bias or scale (a constant per channel or a
scalar) and a softmax over the features run on their blocks.

A group is run layer by layer instead, with the reason stated, when its program cannot be written:
an operator that is not a single-image 2-D convolution or a matrix product of that form, a host step
between two operators that a block cannot run (``host_ops.BLOCK_OPS``, ``BLOCK_CONST_OPS``, a softmax over
the features) or a pool that is not a max pool, a value on the way
that another step or a graph output reads, or a join whose add is not one of the program's (a broadcast
add, an add of a skip that is an intermediate of the group) or whose skip is re-read but not in memory.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from accelmap.codegen.fused_c import conv_shape, is_matrix_product
from accelmap.compile.graph import NetGraph
from accelmap.compile.host_ops import BLOCK_CONST_OPS, BLOCK_OPS, HostWork, block_constant, block_softmax
from accelmap.compile.partition import Step
from accelmap.errors import SpecError
from accelmap.fusion.geometry import Stage, schedules
from accelmap.fusion.group_cost import GroupCost, InnerMappings, store_index
from accelmap.fusion.model_fusion import FusedModel, fuse_model, mapper_search, model_producers
from accelmap.fusion.search import DEFAULT_FUSION, FusionConfig
from accelmap.fusion.stages import MacStage
from accelmap.search.model_result import ModelMapping
from accelmap.sim.fused import FusedSimResult

POOL_OPS = ("MaxPool", "AveragePool")


@dataclass(frozen=True)
class InnerJoinPlan:
    """A residual add inside a group (it spans two residual blocks): run on the block of the tensor it adds to,
    then the host steps after it (``after``: e.g. the block's ReLU), whose result the next stage reads."""

    tensor: int                # the group's tensor it adds to (``Join.at``)
    step: int                  # the add's step
    skip: str                  # its skip value
    chain_first: bool          # the group's value is the add's first input, the skip its second
    after: tuple[int, ...]     # host steps after the add, run on the block


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

    @property
    def name(self) -> str:
        return f"fused_{self.index}"

    @property
    def label(self) -> str:
        j = self.cost.join
        after = {jn.target(len(self.stages)) - 1: f" + {jn.name} inside (skip {sp})" for jn, sp in self.cost.inner_joins}
        return (" -> ".join(st.name + after.get(k, "") for k, st in enumerate(self.stages))
                + (f" + {j.name} (skip {self.cost.skip_policy})" if j else ""))

    @property
    def has_joins(self) -> bool:
        return self.join_step is not None or bool(self.inner)

    def computed(self, stage: int) -> int:
        """Elements of stage ``stage``'s output the tile loop computes, recomputed halos included."""
        c = self.cost
        rows, cols = schedules(self.stages, c.tile_rows, c.tile_cols, c.policies, c.join, c.skip_policy or "re-read",
                               c.inner_joins)
        return rows.computed_total(stage + 1) * cols.computed_total(stage + 1) * self.stages[stage].out_depth


def fuse_network(g: NetGraph, mm: ModelMapping, objective: str, tile_time_limit: float,
                 time_limit: float | None,
                 config: FusionConfig = DEFAULT_FUSION) -> tuple[FusedModel, InnerMappings, list[str]]:
    """The fusion search on the compiled model (its graph written to a temporary file for the chain finder);
    returns the plan, the tile mappings it used (the simulator reuses them) and notes on what the program
    cannot run that ``accelmap map --fuse`` would search."""
    store_index(mm.arch)          # an accelerator without a shared on-chip store: one clear line
    inner = InnerMappings(mapper_search(objective, tile_time_limit))
    model = onnx.ModelProto()
    model.CopyFrom(g.model)
    del model.graph.initializer[:]         # the chain finder reads the graph only
    with tempfile.TemporaryDirectory(prefix="accelmap-fuse-") as td:
        path = Path(td) / "graph.onnx"
        onnx.save(model, path)
        mm_file = dataclasses.replace(mm, model=dataclasses.replace(mm.model, source=str(path)))
        # The program writes every operator's output to memory: no producer leaves its output in the store.
        # Nor does it tile attention over heads (each block runs all its heads): no head tiles searched.
        fm = fuse_model(mm_file, objective=objective,
                        config=dataclasses.replace(config, producers_on_chip=False, head_tiles=False),
                        tile_time_limit=tile_time_limit, time_limit=time_limit, inner=inner)
        kept_off = sorted(model_producers(mm_file, fm.chains)) if config.producers_on_chip else []
    notes = [f"{', '.join(kept_off)} write their outputs to memory: the emitted program runs every operator's output "
             "through memory, so no fused group keeps them in the on-chip store (`accelmap map --fuse` searches "
             "that)"] if kept_off else []
    if config.head_tiles and any(s.heads > 1 for c in fm.chains for s in c.stages):
        notes.append("attention is not tiled over heads in the emitted program (each block runs all its heads; "
                     "`accelmap map --fuse` searches head tiles)")
    return fm, inner, notes


def plan_groups(fm: FusedModel, steps: list[Step], g: NetGraph) -> tuple[list[FusedGroup], list[str]]:
    """The groups of ``fm``'s plan that the program runs fused, and a note for each one it does not."""
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
            groups.append(_plan(len(groups), gc, fm, steps, g, at, producer, readers))
        except SpecError as e:
            notes.append(f"fused group {' -> '.join(gc.names)} runs layer by layer: {e}")
    return groups, notes


def _plan(index: int, gc: GroupCost, fm: FusedModel, steps: list[Step], g: NetGraph, at: dict[str, int],
          producer: dict[str, int], readers: dict[str, int]) -> FusedGroup:
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
        if s.node.op_type == "MatMul" and is_matrix_product(ms):
            # the second operand, a constant or a value computed before the group runs (attention's K^T, V),
            # is read from memory like a weight; an integer product's weight is a constant (partition.py)
            pass
        elif s.node.op_type != "Conv":
            raise SpecError(f"{s.name} is a {s.node.op_type}; fused tiles run convolutions and float MatMuls "
                            "(batched per head too, no broadcast operand)")
        conv_shape(ms)
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
            if hs.placement != "host" or len(ins) != 1:
                raise SpecError(f"step {hs.name} ({hs.op_type}) between {stages[a].name} and {stages[b].name} "
                                "is not a host step of one non-constant input")
            path.append(p)
            v = ins[0]
        path.reverse()
        cur = a
        for p in path:
            hs = steps[p]
            if hs.op_type in POOL_OPS:
                cur += 1
                if hs.op_type != "MaxPool" or cur >= b or stages[cur].name != hs.node.name:
                    raise SpecError(f"step {hs.name} ({hs.op_type}) is not the group's max-pooling stage")
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
                     inner=tuple(sorted(inner, key=lambda x: x.tensor)))
    if gc.join is not None:
        _plan_join(grp, steps, g, producer, readers)
    return grp


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


def _check_block_step(s: Step, g: NetGraph, channel_axis: int) -> None:
    """One clear line when a fused block cannot run the host step ``s`` (``host_ops.block_lines``)."""
    if s.op_type in BLOCK_CONST_OPS:
        block_constant(s, g, channel_axis)
    elif s.op_type in ("Softmax", "Softmax (QDQ)"):
        block_softmax(s, g, channel_axis)
    elif s.op_type not in BLOCK_OPS:
        raise SpecError(f"step {s.name} ({s.op_type}) is not element-wise; a fused tile runs "
                        f"{', '.join(sorted(BLOCK_OPS))}, a float {', '.join(BLOCK_CONST_OPS)} with a constant per "
                        "channel, a float Softmax over the channels of a matrix product, and max pooling")
