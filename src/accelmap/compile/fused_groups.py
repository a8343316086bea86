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
from accelmap.fusion.model_fusion import FusedModel, fuse_model, mapper_search
from accelmap.fusion.search import DEFAULT_FUSION, FusionConfig
from accelmap.fusion.stages import MacStage
from accelmap.search.model_result import ModelMapping
from accelmap.sim.fused import FusedSimResult

POOL_OPS = ("MaxPool", "AveragePool")


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

    @property
    def name(self) -> str:
        return f"fused_{self.index}"

    @property
    def label(self) -> str:
        j = self.cost.join
        return " -> ".join(st.name for st in self.stages) + (f" + {j.name} (skip {self.cost.skip_policy})" if j else "")

    def computed(self, stage: int) -> int:
        """Elements of stage ``stage``'s output the tile loop computes, recomputed halos included."""
        c = self.cost
        rows, cols = schedules(self.stages, c.tile_rows, c.tile_cols, c.policies, c.join, c.skip_policy or "re-read")
        return rows.computed_total(stage + 1) * cols.computed_total(stage + 1) * self.stages[stage].out_depth


def fuse_network(g: NetGraph, mm: ModelMapping, objective: str, tile_time_limit: float,
                 time_limit: float | None, config: FusionConfig = DEFAULT_FUSION) -> tuple[FusedModel, InnerMappings]:
    """The fusion search on the compiled model (its graph written to a temporary file for the chain finder);
    returns the plan and the tile mappings it used (the simulator reuses them)."""
    store_index(mm.arch)          # an accelerator without a shared on-chip store: one clear line
    inner = InnerMappings(mapper_search(objective, tile_time_limit))
    model = onnx.ModelProto()
    model.CopyFrom(g.model)
    del model.graph.initializer[:]         # the chain finder reads the graph only
    with tempfile.TemporaryDirectory(prefix="accelmap-fuse-") as td:
        path = Path(td) / "graph.onnx"
        onnx.save(model, path)
        mm_file = dataclasses.replace(mm, model=dataclasses.replace(mm.model, source=str(path)))
        fm = fuse_model(mm_file, objective=objective, config=config, tile_time_limit=tile_time_limit,
                        time_limit=time_limit, inner=inner)
    return fm, inner


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
    for a, b in zip(order, order[1:], strict=False):
        path: list[int] = []
        v = steps[step_of[b]].inputs[0]
        while True:
            if v in g.outputs or readers.get(v, 0) != 1:
                raise SpecError(f"value {v!r} is read outside the group")
            p = producer.get(v)
            if p is None:
                raise SpecError(f"value {v!r} is not computed by the program")
            if p == step_of[a]:
                break
            hs = steps[p]
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
                     tuple(sorted(members)), x, last.outputs[0], step_of[order[-1]], channel_axis=axis)
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
    if join.skip is None:
        if producer.get(skip) is None and skip not in g.inputs:
            raise SpecError(f"the skip {skip!r} of {join.name} is not computed by the program")
    elif join.skip == 0:
        if skip != grp.input:
            raise SpecError(f"the skip {skip!r} of {join.name} is not the group's input {grp.input!r}")
    else:
        raise SpecError(f"the skip of {join.name} is the group's intermediate tensor {join.skip}, which the program "
                        "does not keep for an add")
    for p in path:
        grp.epilogues[len(grp.stages) - 1] += (p,)
    grp.members = tuple(sorted((*grp.members, *path, nxt)))
    grp.join_step, grp.skip, grp.join_chain_first = nxt, skip, first
    grp.output, grp.at = out, nxt


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
