"""C for a fused group of convolutions (and max-pooling windows) or of matrix products: one tile loop, each
stage computing its block of the tile into an on-chip buffer, halos recomputed or cached as the policy says.
A matrix product (``product_batch``: MatMul, batched per head, or a dense layer, ONNX Gemm with transB=1) is a
1x1 convolution on chip, grouped per batch (attention's heads); its tensors stay batch-major, token-major in
memory, as ONNX stores them. Products of different batches may follow each other (a projection into the heads'
products and back, ``tensor_batches``).

Every on-chip tensor carries a valid flag per element, cleared as its policy evicts it: at every
tile (fully recompute), at every tile row (H-cached-V-recompute) or never (fully cached); the group's
input is fetched from off-chip memory into its buffer the same way. A read of an element that is not
valid is counted, so a schedule that relies on something its policy does not keep shows up as a
nonzero count (and, since buffers start filled with a poison value, as a wrong result). Counters:
input elements fetched, output elements written, MACs per stage (every tap of every computed output,
padded taps included, as the model counts them) and invalid reads.

A group may end with a residual *join* (``JoinC``): the last stage's block, after its epilogue, plus the
skip tensor at the same positions, element by element, as the fusion plan chose: *kept*, the skip is one
of the group's tensors and is read from its on-chip buffer (the tile schedule then covers its positions,
``fusion.geometry.schedules`` with the join; a read of an element not valid is counted like any other),
or *re-read*, each element fetched once from the skip tensor in memory as its tile is written (counted:
skip elements fetched). The join's own lines (an integer add with its requantization, or a float add)
turn the two blocks into the group's output block.

``fused_group_c`` writes the tile loop for any element types: a stage computes its block (rows x
columns of the tile, all channels) into a contiguous block buffer, then its *epilogue* (C lines the
caller gives, e.g. the requantization of an integer product and the element-wise operators after it)
turns that block into the values the next stage reads, which are scattered into the tensor's buffer.
``accelmap compile --fuse`` embeds such a function in the network program; ``generate_fused_c`` is
the same loop on 64-bit integers with no epilogue, compared bit for bit with NumPy (``run_fused``).

Every on-chip tensor's buffer is the model's reservation for it (``buffer_shapes``; ``fusion.geometry``'s live
maximum, checked against a point walk): a ring of the tile's window for a tensor whose rows are recomputed, a line
buffer of its most positions live at once for a fully cached one (``codegen.cached_slots``); each slot's tag says
which element it holds, so a read the buffer no longer (or not yet) holds is counted as invalid.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from accelmap.codegen.build import compile_shared, compile_shared_units
from accelmap.codegen.cached_slots import CachedSlots, cached_slots
from accelmap.codegen.fused_blocks import BlockProgram, BlockPrograms
from accelmap.codegen.fused_weights import BlockFetch, WeightTransfers
from accelmap.errors import SpecError
from accelmap.fusion.geometry import MODES, Join, Stage, all_joins, check_join, head_segment, schedules
from accelmap.fusion.stages import MacStage
from accelmap.workload.numpy_reference import reference, stored_shape

POISON = -7777777
# Pooling stages: the maximum, the average over the taps inside the input, the average over the whole window
POOLS = ("max", "avg", "avg-pad")

# (block buffer of the stage's results, block buffer of its epilogue's output, elements, elements per channel)
# -> C lines computing the second from the first
Epilogue = Callable[[str, str, str, str], list[str]]
# (the last stage's block after its epilogue, the skip's block, the output block, elements) -> C lines
JoinLines = Callable[[str, str, str, str], list[str]]


@dataclass(frozen=True)
class FusedRun:
    output: np.ndarray
    input_fetched: int
    output_written: int
    macs: tuple[int, ...]
    invalid_reads: int
    skip_fetched: int = 0
    weight_bits: tuple[int, ...] = ()       # per stage: weight bits fetched from memory
    # per stage whose blocks ran their tile programs: their counters [levels][operands][4], summed
    level_counts: dict[int, np.ndarray] | None = None


@dataclass(frozen=True)
class StageC:
    """How one stage of a fused group is written in C.

    A multiply-accumulate stage (a convolution) reads its input less ``zero_point`` and multiplies it
    by ``weights`` (a C array [K][C/groups][R][S]) into ``acc_type``; a pooling stage takes the maximum
    in ``acc_type`` (the input's type), starting from ``acc_init``, or with ``pool`` ``avg`` / ``avg-pad`` the
    average: the sum in the window's order, divided by the taps inside the input (``avg``, ONNX's
    count_include_pad=0) or by the window's size (``avg-pad``), as the host's pooling does it (no ceil mode and no
    dilation in a chain, so every window lies inside the padded input). ``epilogue`` (None: a copy) turns the
    block into ``out_type``, the type of the tensor the stage leaves on chip (or writes off chip).
    ``weight_type``: the C type of the weights' elements (their copy in the store, when the group keeps them).
    """

    acc_type: str
    out_type: str
    weights: str = ""
    zero_point: int = 0
    groups: int = 1
    acc_init: str = "0"
    epilogue: Epilogue | None = None
    pool: str = "max"
    weight_type: str = ""


@dataclass(frozen=True)
class JoinC:
    """A residual join in C: ``join`` (its skip tensor) taken as ``skip_policy`` says (``kept``: from the skip's
    on-chip buffer; ``re-read``: from the function's argument for it, the tensor in memory), its elements of
    ``skip_type``; ``lines`` compute the add's block, of ``out_type``, from the block of the tensor it adds to
    and the skip's. A join inside the group (``join.at``) may have an ``epilogue`` turning the add's block into
    the values the next stage reads (e.g. the ReLU after a ResNet block's add), of ``left_type``."""

    join: Join
    skip_policy: str
    skip_type: str
    out_type: str
    lines: JoinLines
    epilogue: Epilogue | None = None
    left_type: str | None = None
    # False: an add the fusion model leaves to the host (a pre-LN transformer's attention output plus the layer's
    # input, no residual join of the plan): its skip, re-read, is counted apart (the last counter), not as the
    # plan's skip fetched
    charged: bool = True
    # how the skip is laid out in memory: OWN_LAYOUT (as the tensor it adds to), or the batch of a matrix product's
    # layout (``product_batch``; None: a convolution's channel-major)
    skip_batch: int | None = -1

    @property
    def leaves(self) -> str:
        """The type of the tensor the join leaves on chip (or writes)."""
        return self.left_type if self.epilogue is not None and self.left_type else self.out_type


# ``JoinC.skip_batch``: the skip laid out as the tensor it adds to
OWN_LAYOUT = -1


def _table(name: str, vals: list[int]) -> str:
    return f"static const int {name}[{max(1, len(vals))}] = {{{', '.join(map(str, vals or [0]))}}};"


# Matrix products by kind: (output, first input, weight indices), the reduction dim, and whether the weight is
# stored output-major ([N][K]: a dense layer, ONNX Gemm with transB=1) rather than reduction-major ([K][N]).
_PRODUCT_FORMS = {"matmul": ((("M", "N"), ("M", "K"), ("K", "N")), "K", False),
                  "batched_matmul": ((("B", "M", "N"), ("B", "M", "K"), ("B", "K", "N")), "K", False),
                  "dense": ((("N", "K"), ("N", "C"), ("K", "C")), "C", True)}


def product_batch(ms: MacStage) -> int | None:
    """The batch of a matrix product ``O[b, M, N] += A[b, M, K] * W[b, K, N]`` (1 without batch axes; a dense layer
    ``O[N, K] += I[N, C] * W[K, C]`` too, its weight stored ``[K][C]``), fused along its rows (tokens) like a
    grouped 1x1 convolution, one group per batch, of K input channels into N; its tensors are stored batch-major,
    then token-major (``[b][M][K]``, ``[b][M][N]``) and its weight ``[b][K][N]`` (``weight_out_major``: ``[N][K]``).
    None for any other operator (a convolution, a product with broadcast or transposed operands)."""
    op = ms.operator
    form = _PRODUCT_FORMS.get(op.kind)
    if form is None:
        return None
    want, reduced, _ = form
    if {d for d, _ in op.dims} != set(want[0]) | {reduced}:
        return None
    got = tuple(tuple(d for ix in o.indices for d in ix.dims) for o in op.operands)
    return op.sizes.get("B", 1) if got == want else None


def weight_out_major(ms: MacStage) -> bool:
    """Whether a matrix product's weight is stored output-major (a dense layer's ``W[K][C]``)."""
    return _PRODUCT_FORMS[ms.operator.kind][2]


def is_matrix_product(ms: MacStage) -> bool:
    """A matrix product ``product_batch`` covers."""
    return product_batch(ms) is not None


def conv_shape(ms: MacStage) -> tuple[int, int, int, int, int]:
    """(kernel rows, kernel columns, dilation rows, dilation columns, groups) of a single-image convolution, or
    (1, 1, 1, 1, 1) for a matrix product (``is_matrix_product``)."""
    op = ms.operator
    batch = product_batch(ms)
    if batch is not None:
        return 1, 1, 1, 1, batch
    if op.kind not in ("conv2d", "depthwise_conv2d", "grouped_conv2d") or op.sizes.get("N", 1) != 1:
        raise SpecError(f"fused C covers single-image 2-D convolutions and matrix products without batch axes; "
                        f"{op.name} is {op.kind}"
                        + (f" of batch {op.sizes['N']}" if op.sizes.get("N", 1) != 1 else ""))
    r, s = op.sizes.get("R", 1), op.sizes.get("S", 1)
    dh = (ms.stage.rows.span - 1) // (r - 1) if r > 1 else 1
    dw = (ms.stage.cols.span - 1) // (s - 1) if s > 1 else 1
    return r, s, dh, dw, op.sizes.get("G", 1)


def tensor_batches(name: str, n: int, macs: dict[int, MacStage]) -> list[int | None]:
    """Per tensor of a group of ``n`` stages (its input, then each stage's output): the batch by which it is laid out
    in memory, that of the matrix product writing it (the group's input: of the product reading it); all None in a
    group of convolutions. Products of different batches may follow each other (attention's projection, one batch,
    into its products per head): on chip channel ``b * X + x`` of the one is channel ``b * X + x`` of the other,
    the heads' split of the features. A group mixing convolutions and matrix products gets one clear line."""
    products = {j: product_batch(ms) for j, ms in macs.items()}
    if not products or all(b is None for b in products.values()):
        return [None] * (n + 1)
    if None in products.values() or len(products) != n:
        raise SpecError(f"fused group {name}: it mixes convolutions (or pooling) and matrix products")
    return [products[0]] + [products[j] for j in range(n)]


def block_elements(stages: tuple[Stage, ...], tile_rows: int, tile_cols: int, policies: tuple[str, ...],
                   join: Join | None = None, skip_policy: str = "re-read",
                   inner_joins: tuple[tuple[Join, str], ...] = ()) -> list[int]:
    """Per stage: the most elements (all channels) of one block it computes (with ``join`` and ``inner_joins``:
    the schedule that keeps or re-reads their skips)."""
    rows, cols = schedules(stages, tile_rows, tile_cols, policies, join, skip_policy, inner_joins)
    return [st.out_depth * max(t[j + 1][1] - t[j + 1][0] for t in rows.comp)
            * max(t[j + 1][1] - t[j + 1][0] for t in cols.comp) for j, st in enumerate(stages)]


class BufferShape(NamedTuple):
    """A tensor's on-chip buffer in the C (``buffer_shapes``): ``channels`` x ``rows`` x ``cols`` slots; ``bounded``:
    smaller than the tensor; ``cached``: a fully cached tensor's line buffer, its ``rows`` slots per channel (one
    column) placed by the table of ``codegen.cached_slots``."""

    channels: int
    rows: int
    cols: int
    bounded: bool
    cached: CachedSlots | None = None


def buffer_shapes(stages: tuple[Stage, ...], tile_rows: int, tile_cols: int, policies: tuple[str, ...],
                  join: Join | None = None, skip_policy: str = "re-read",
                  inner_joins: tuple[tuple[Join, str], ...] = (),
                  head_tile: int | None = None) -> list[BufferShape]:
    """Per on-chip tensor of the group (its input, then every intermediate): its buffer in the C, exactly the model's
    reservation for it (``fused_counts``' ``buffer_bits``). A tensor whose rows are recomputed at every tile
    row (fully recompute, H-cached-V-recompute) lives within the tile's window of it, at most ``max_need`` rows by
    ``max_need`` columns (``fusion.geometry.AxisSchedule``): its buffer is that window, position (r, c) in slot
    (r mod rows, c mod columns), as a ring along each axis (consecutive windows only move forward and keep their
    common part in place). A fully cached tensor keeps its line buffer: the most positions live at one tile
    (``fusion.geometry.live_elements``), each position in the slot ``codegen.cached_slots`` gives it. Inside a head
    tile's run a buffer holds only the head tile's channels, channel k in slot k mod that many."""
    rows, cols = schedules(stages, tile_rows, tile_cols, policies, join, skip_policy, inner_joins)
    segment = head_segment(stages, head_tile, all_joins(join, skip_policy, inner_joins))
    depth = [stages[0].in_depth] + [st.out_depth for st in stages]
    height = [stages[0].in_rows] + [st.out_rows for st in stages]
    width = [stages[0].in_cols] + [st.out_cols for st in stages]
    out = []
    for t in range(len(stages)):
        d = depth[t]
        if segment is not None and segment[0] < t <= segment[1]:
            assert head_tile is not None
            d = d // stages[t - 1].heads * head_tile
        if policies[t] == "fully-cached":
            slots = cached_slots(rows, cols, t, height[t], width[t])
            out.append(BufferShape(d, slots.slots, 1, d * slots.slots < depth[t] * height[t] * width[t], slots))
            continue
        out.append(BufferShape(d, rows.max_need(t), cols.max_need(t), True))
    return out


def counter_count(n_stages: int, joins: bool, host_adds: bool = False) -> int:
    """Counters of a fused group's C (``fused_group_c``): ``joins``, whether it runs joins the model charges;
    ``host_adds``, adds it leaves to the host (``JoinC.charged``)."""
    return 3 + n_stages + joins + n_stages + host_adds


def fused_group_c(name: str, stages: tuple[Stage, ...], macs: dict[int, MacStage], tile_rows: int, tile_cols: int,
                  policies: tuple[str, ...], specs: tuple[StageC, ...], in_type: str, join: JoinC | None = None,
                  inner: tuple[JoinC, ...] = (), weights: WeightTransfers | None = None,
                  head_tile: int | None = None, programs: BlockPrograms | None = None) -> str:
    """C of ``static void NAME(const IN *x, OUT *y, long long *cnt)`` for the group (see the module doc); with
    joins inside the group (``inner``, spanning residual blocks) and a ``join`` ending it, one skip argument per
    join before ``y`` (``const SKIP *skip_in0, ...`` for the inner ones, then ``const SKIP *skip``), read only
    where that join's skip is re-read.

    ``cnt`` (``counter_count``): 0 input elements fetched, 1 output elements written, 2 invalid reads, 3.. MACs
    per stage, then with joins the skip elements fetched from memory (all joins the model charges), then per stage
    the weight bits
    fetched from memory: with ``weights`` (``codegen.fused_weights``), once into the store before the first tile
    (resident; the blocks then read that copy) or by each block's fetch program (streamed; the programs are
    translation units of their own, declared here), else none (zeros); last, with adds the model leaves to the
    host (``JoinC.charged`` False), the elements of their skips read from memory. It needs <string.h> and whatever
    the epilogues call.

    ``head_tile`` (attention tiled over heads, ``fusion.geometry.head_segment``): within each tile, the run of
    head-split stages (the scores and the context per head) runs once per head tile, each block computing the
    channels of ``head_tile`` heads (a block buffer of that share; the epilogues, e.g. the softmax per head, on
    it); the tensors inside the run hold one head tile at a time, so their valid flags are cleared at every head
    tile (a read of another head tile's values is counted as invalid).

    ``programs`` (``codegen.fused_blocks``): the multiply-accumulate stages it covers compute each block by the
    block's tile program, through its mapping's loops and buffers: the block's input window gathered from the
    on-chip buffer (padding as zeros; less the stage's zero point) in the tile operator's layout and the program's
    element types (``BlockPrograms.types``; the 64-bit harness runs ``float`` programs, exact on its small integers,
    on a converted copy of the weights), the program run, its output scattered into the block buffer; its counters
    per level summed over the blocks in ``NAME_lvlJ`` (``[levels][operands][4]``), zeroed at the call.
    """
    jn, policy = (join.join, join.skip_policy) if join is not None else (None, "re-read")
    tile_programs = programs.programs if programs is not None else {}
    levels = programs.levels if programs is not None else 0
    # the joins of the model (an add left to the host re-reads a skip from outside: it moves no window, and the
    # head tiles' refusal of joins is the model's, about its joins)
    inner_pairs = tuple((jc.join, jc.skip_policy) for jc in inner if jc.charged)
    rows, cols = schedules(stages, tile_rows, tile_cols, policies, jn, policy, inner_pairs)
    n = len(stages)
    segment = head_segment(stages, head_tile, tuple(inner_pairs) + (((jn, policy),) if jn is not None else ()))
    if len(specs) != n:
        raise SpecError(f"fused group {name}: {n} stages but {len(specs)} stage descriptions")
    types = [in_type] + [sp.out_type for sp in specs]
    # the join adding to tensor t (t = n: the output), and its skip argument's name
    join_at: dict[int, tuple[JoinC, str]] = {}
    for i, jc in enumerate(inner):
        tgt = jc.join.at
        if tgt is None or not 1 <= tgt < n or tgt in join_at:
            raise SpecError(f"fused group {name}: join {jc.join.name} inside the group must add to one of its "
                            f"intermediates 1..{n - 1}, one join each")
        join_at[tgt] = (jc, f"skip_in{i}")
        types[tgt] = jc.leaves
    if join is not None:
        join_at[n] = (join, "skip")
    for jc, _ in join_at.values():
        check_join(stages, jc.join, jc.skip_policy)
        if not jc.charged and (jc.skip_policy != "re-read" or jc.join.skip is not None):
            raise SpecError(f"fused group {name}: the add {jc.join.name} left to the host re-reads a skip from "
                            "outside the group; it cannot keep one")
        if jc.skip_policy == "kept" and jc.join.skip is not None and jc.skip_type != types[jc.join.skip]:
            raise SpecError(f"fused group {name}: join {jc.join.name} keeps tensor {jc.join.skip}, whose buffer is "
                            f"not of its skip type {jc.skip_type}")
    depth = [stages[0].in_depth] + [st.out_depth for st in stages]
    height = [stages[0].in_rows] + [st.out_rows for st in stages]
    width = [stages[0].in_cols] + [st.out_cols for st in stages]
    shapes = buffer_shapes(stages, tile_rows, tile_cols, policies, jn, policy, inner_pairs, head_tile)
    size = [b.channels * b.rows * b.cols for b in shapes]      # elements of each on-chip buffer

    def slot(t: int, k: str, r: str, c: str) -> str:
        """The slot of tensor ``t``'s element (channel k, row r, column c) in its buffer (``buffer_shapes``). A
        position of a fully cached tensor no tile needs has no slot: it reads the spare slot past the buffer,
        which never holds an element (so such a read is counted as invalid)."""
        kb, rb, cb, _, cached = shapes[t]
        kk = f"({k}) % {kb}" if kb < depth[t] else f"({k})"
        if cached is not None:
            at = f"{name}_S{t}[(long)({r}) * {width[t]} + ({c})]"
            return f"({at} < 0 ? {size[t]}L : (long){kk} * {rb} + {at})"
        rr = f"({r}) % {rb}" if rb < height[t] else f"({r})"
        cc = f"({c}) % {cb}" if cb < width[t] else f"({c})"
        return f"(((long){kk} * {rb} + {rr}) * {cb} + {cc})"

    def tag(t: int, k: str, r: str, c: str) -> str:
        """What a slot of tensor ``t`` holds when it holds that element: its position plus one (0: nothing)."""
        return f"((int)((((long)({k}) * {height[t]} + ({r})) * {width[t]} + ({c})) + 1))"
    blocks = block_elements(stages, tile_rows, tile_cols, policies, jn, policy, inner_pairs)
    full_blocks = list(blocks)      # every channel (the head tiles' blocks are a share of it)
    charged = any(jc.charged for jc, _ in join_at.values())
    ncnt = counter_count(n, charged, any(not jc.charged for jc, _ in join_at.values()))
    wcnt = 3 + n + charged        # the first weight counter
    weights = weights or WeightTransfers({}, {}, {})
    wsrc = {j: f"{name}_w{j}" if j in weights.resident else sp.weights for j, sp in enumerate(specs)}
    products = {j: product_batch(ms) for j, ms in macs.items()}
    # Matrix products keep their tensors batch-major, then token-major in memory ([batch][rows][cols][channels]);
    # on chip every buffer is channel-major (channel = batch * channels + channel), as for convolutions, so only
    # the fetches and stores below index differently.
    batches = tensor_batches(name, n, macs)

    def mem(t: int, k: str, r: str, c: str, layout: int | None = OWN_LAYOUT) -> str:
        """The index of tensor ``t``'s element (channel k, row r, column c) in memory (laid out as ``layout`` says,
        ``JoinC.skip_batch``)."""
        batch = batches[t] if layout == OWN_LAYOUT else layout
        if batch is None:
            return f"((long){k} * {height[t]} + {r}) * {width[t]} + {c}"
        x = depth[t] // batch
        pos = f"(long){r} * {width[t]} + {c}"
        if batch == 1:
            return f"({pos}) * {x} + {k}"
        return f"(((long)({k}) / {x}) * {height[t] * width[t]} + {pos}) * {x} + ({k}) % {x}"

    w: list[str] = [f"/* fused group {name}: {' -> '.join(st.name for st in stages)}, tile {tile_rows}x{tile_cols}, "
                    f"halos {', '.join(policies)}"
                    + "".join(f", join {jc.join.name} (skip {jc.skip_policy})" for jc, _ in join_at.values()) + " */"]
    w += [f"int {fn}(void **T, long long *counters);  /* a block's weight fetches (its tile mapping's) */"
          for fn, _ in weights.units()]
    for j, by_shape in tile_programs.items():
        first = next(iter(by_shape.values()))
        w += [f"int {p.function}(void **T, long long *counters);  /* a block's tile program */"
              for p in by_shape.values()]
        w.append(f"long long {name}_lvl{j}[{levels * len(first.operator.operands) * 4}];   /* its counters per level */")
        wt = programs.types(j)[1] if programs is not None else ""
        if wt != specs[j].weight_type:
            w.append(f"static {wt} {name}_wf{j}[{macs[j].operator.footprint(macs[j].operator.inputs[1])}];"
                     "   /* its weights as the tile programs' elements */")
    for j, count in weights.resident.items():
        if not specs[j].weight_type:
            raise SpecError(f"fused group {name}: stage {stages[j].name} keeps its weights resident but has no "
                            "weight type")
        w.append(f"static {specs[j].weight_type} {name}_w{j}[{count}];   /* {stages[j].name}'s weights in the store */")
    for t in range(n + 1):
        w.append(_table(f"{name}_RLO{t}", [tile[t][0] for tile in rows.comp]))
        w.append(_table(f"{name}_RHI{t}", [tile[t][1] for tile in rows.comp]))
        w.append(_table(f"{name}_CLO{t}", [tile[t][0] for tile in cols.comp]))
        w.append(_table(f"{name}_CHI{t}", [tile[t][1] for tile in cols.comp]))
    for t in range(n):
        kb, rb, cb, bounded, cached = shapes[t]
        if cached is not None:
            # the line buffer's slots and one spare past them (what a position no tile needs reads)
            w.append(_table(f"{name}_S{t}", list(cached.table)))
            w.append(f"static {types[t]} {name}_b{t}[{size[t] + 1}]; static int {name}_v{t}[{size[t] + 1}];"
                     f"   /* a line buffer of {kb} channels x {rb} positions */")
            continue
        w.append(f"static {types[t]} {name}_b{t}[{size[t]}]; static int {name}_v{t}[{size[t]}];"
                 + (f"   /* a ring of {kb} channels x {rb} rows x {cb} columns */" if bounded else ""))
    # per stage: its channels in one block, as C expressions of the head tile's first head ``h0`` (all of them
    # outside the head-split run)
    klo, khi = ["0"] * n, [str(depth[j + 1]) for j in range(n)]
    if segment is not None:
        assert head_tile is not None
        for j in range(segment[0], segment[1] + 1):
            per_head = depth[j + 1] // stages[j].heads
            klo[j], khi[j] = f"h0 * {per_head}", f"(h0 + {head_tile}) * {per_head}"
            blocks[j] = blocks[j] // stages[j].heads * head_tile
    # an add left to the host right after the heads' run waits for every head of the tile: it runs after the head
    # loop, on the whole block of its tensor (which holds every head), in place
    after_heads = segment[1] + 1 if segment is not None and segment[1] + 1 in join_at else None
    if after_heads is not None:
        jc = join_at[after_heads][0]
        if after_heads >= n or jc.charged or specs[after_heads - 1].out_type != types[after_heads]:
            raise SpecError(f"fused group {name}: the add {jc.join.name} after the heads' run must be one left to the "
                            "host, inside the group, leaving the type the heads' run leaves")
    for j, sp in enumerate(specs):
        w.append(f"static {sp.acc_type} {name}_s{j}[{blocks[j]}]; static {sp.out_type} {name}_e{j}[{blocks[j]}];")
    out_type = types[n]
    if join is not None:
        out_type = join.out_type
    for t, (jc, _) in sorted(join_at.items()):
        nb = full_blocks[t - 1]
        w.append(f"static {jc.skip_type} {name}_k{t}[{nb}]; static {jc.out_type} {name}_j{t}[{nb}];"
                 + (f" static {jc.leaves} {name}_q{t}[{nb}];" if jc.epilogue is not None else "")
                 + (f" static {types[t]} {name}_h{t}[{nb}];" if t == after_heads else ""))
    skip_arg = "".join(f"const {jc.skip_type} *{arg}, " for _, (jc, arg) in sorted(join_at.items()))
    w += ["", f"static void {name}(const {in_type} *x, {skip_arg}{out_type} *y, long long *cnt) {{",
          f"  memset(cnt, 0, sizeof(long long) * {ncnt});"]
    for j in tile_programs:
        w.append(f"  memset({name}_lvl{j}, 0, sizeof {name}_lvl{j});")
        wt = programs.types(j)[1] if programs is not None else ""
        if wt != specs[j].weight_type:
            w.append(f"  for (long i = 0; i < (long)(sizeof {name}_wf{j} / sizeof {name}_wf{j}[0]); i++) "
                     f"{name}_wf{j}[i] = ({wt}){specs[j].weights}[i];")
    for j, count in weights.resident.items():        # fetched once, before the first tile
        w.append(f"  for (long i = 0; i < {count}; i++) {name}_w{j}[i] = {specs[j].weights}[i];"
                 f"  cnt[{wcnt + j}] += {count}LL * {weights.bits[j]};")
    for t in range(n):
        w.append(f"  for (long i = 0; i < {size[t] + (shapes[t].cached is not None)}; i++) {{ "
                 f"{name}_b{t}[i] = ({types[t]}){POISON}; "
                 f"{name}_v{t}[i] = 0; }}")
    w.append(f"  for (int ty = 0; ty < {len(rows.comp)}; ty++) {{")
    for t in range(n):
        if policies[t] == "H-cached-V-recompute":
            w.append(f"    memset({name}_v{t}, 0, sizeof {name}_v{t});   /* tensor {t}: rows recomputed, a new tile row */")
    w.append(f"    for (int tx = 0; tx < {len(cols.comp)}; tx++) {{")
    for t in range(n):
        if policies[t] == "fully-recompute":
            w.append(f"      memset({name}_v{t}, 0, sizeof {name}_v{t});   /* tensor {t}: recomputed at every tile */")
    w += [f"      for (int d = 0; d < {depth[0]}; d++)",
          f"        for (int r = {name}_RLO0[ty]; r < {name}_RHI0[ty]; r++)",
          f"          for (int c = {name}_CLO0[tx]; c < {name}_CHI0[tx]; c++) {{",
          f"            long i = {slot(0, 'd', 'r', 'c')};",
          f"            {name}_b0[i] = x[{mem(0, 'd', 'r', 'c')}]; {name}_v0[i] = {tag(0, 'd', 'r', 'c')}; cnt[0]++;",
          "          }"]
    def join_lines(t: int, out: str, nblk: str) -> tuple[list[str], str]:
        """The C of the join adding to tensor ``t`` on its block ``out`` (every channel, positions r0..r1 x c0..c1,
        ``nblk`` elements): gather the skip at the block's positions (on chip, or fetched from memory), add, then
        the join's epilogue; and the block holding the result."""
        jc, arg = join_at[t]
        kept = jc.join.skip if jc.skip_policy == "kept" else None
        take = (f"long o = {slot(kept, 'k', 'r', 'c')}; if ({name}_v{kept}[o] != {tag(kept, 'k', 'r', 'c')}) "
                f"cnt[2]++; {name}_k{t}[b] = {name}_b{kept}[o];" if kept is not None
                else f"{name}_k{t}[b] = {arg}[{mem(t, 'k', 'r', 'c', jc.skip_batch)}]; "
                f"cnt[{3 + n if jc.charged else ncnt - 1}]++;")
        lines = [f"        for (int k = 0; k < {depth[t]}; k++)",
                 "          for (int r = r0; r < r1; r++)",
                 "            for (int c = c0; c < c1; c++) {",
                 "              long b = ((long)k * br + (r - r0)) * bc + (c - c0);",
                 f"              {take}", "            }"]
        lines += ["        " + ln for ln in jc.lines(out, f"{name}_k{t}", f"{name}_j{t}", f"({nblk})")]
        out = f"{name}_j{t}"
        if jc.epilogue is not None:
            lines += ["        " + ln for ln in jc.epilogue(out, f"{name}_q{t}", f"({nblk})", "(br * bc)")]
            out = f"{name}_q{t}"
        return lines, out

    for j, (st, sp) in enumerate(zip(stages, specs, strict=True)):
        src, blk, out = f"{name}_b{j}", f"{name}_s{j}", f"{name}_e{j}"
        hin, win = height[j], width[j]
        if segment is not None and j == segment[0]:
            w.append(f"      for (int h0 = 0; h0 < {st.heads}; h0 += {head_tile}) {{   /* a head tile */")
            for t in range(segment[0] + 1, segment[1] + 1):
                w.append(f"      memset({name}_v{t}, 0, sizeof {name}_v{t});   /* tensor {t}: one head tile at a time */")
        w += [f"      {{ /* stage {j}: {st.name} */",
              f"        const int r0 = {name}_RLO{j + 1}[ty], r1 = {name}_RHI{j + 1}[ty], "
              f"c0 = {name}_CLO{j + 1}[tx], c1 = {name}_CHI{j + 1}[tx];",
              "        const long br = r1 - r0, bc = c1 - c0;",
              "        if (br > 0 && bc > 0) {"]
        def head_share(ptr: str, j: int = j, st: Stage = st) -> str:
            """The pointer to the share of stage j's weights of the head tile's heads (``ptr`` inside a head-tiled
            run: its blocks fetch and read only that share)."""
            if klo[j] == "0" or j not in macs:
                return ptr
            return f"({ptr} + (long)h0 * {macs[j].operator.footprint(macs[j].operator.inputs[1]) // st.heads})"
        w += _fetch_lines(name, j, weights.streamed.get(j, {}), head_share(specs[j].weights), wcnt + j)
        k0 = klo[j]     # the block's first channel: its index in the block buffer is k - k0
        ms = macs.get(j)
        if ms is not None and j in tile_programs:
            assert programs is not None
            elems = programs.types(j)
            wname = head_share(wsrc[j] if elems[1] == sp.weight_type else f"{name}_wf{j}")
            w += _block_program_lines(name, j, st, ms, sp, tile_programs[j], elems, wname, depth, height, width,
                                      slot, tag, blk, levels, head_tile if klo[j] != "0" else None)
        else:
            w += [f"        for (int k = {k0}; k < {khi[j]}; k++)",
                  "          for (int r = r0; r < r1; r++)",
                  "            for (int c = c0; c < c1; c++) {"]
            if ms is None:
                if sp.pool not in POOLS:
                    raise SpecError(f"fused group {name}: pooling stage {st.name} is {sp.pool!r}; one of {', '.join(POOLS)}")
                take = f"if ({src}[i] > acc) acc = {src}[i];" if sp.pool == "max" else f"acc += {src}[i]; taps++;"
                w += [f"              {sp.acc_type} acc = {sp.acc_init if sp.pool == 'max' else '0'};",
                      "              long taps = 0;",
                      f"              for (int kr = 0; kr < {st.rows.span}; kr++) "
                      f"for (int kc = 0; kc < {st.cols.span}; kc++) {{",
                      f"                int ir = r * {st.rows.stride} - {st.rows.pad} + kr, "
                      f"ic = c * {st.cols.stride} - {st.cols.pad} + kc;",
                      f"                if (ir < 0 || ir >= {hin} || ic < 0 || ic >= {win}) continue;",
                      f"                long i = {slot(j, 'k', 'ir', 'ic')};",
                      f"                if ({name}_v{j}[i] != {tag(j, 'k', 'ir', 'ic')}) cnt[2]++;",
                      f"                {take}", "              }",
                      "              (void)taps;"]
                if sp.pool != "max":
                    divisor = "taps" if sp.pool == "avg" else f"{st.rows.span * st.cols.span}L"
                    w.append(f"              acc = acc / ({sp.acc_type}){divisor};")
            else:
                kr_, ks_, dh, dw, groups = conv_shape(ms)
                cg, kg = depth[j] // groups, depth[j + 1] // groups
                zp = f" - {sp.zero_point}" if sp.zero_point else ""
                if products[j] is None:          # a convolution's W[K][C/groups][R][S]
                    widx = f"(((long)k * {cg} + ci) * {kr_} + kr) * {ks_} + kc"
                elif weight_out_major(ms):       # a dense layer's W[N][K]
                    widx = f"(long)k * {cg} + ci"
                else:                            # W[b][K][N]
                    widx = f"((long)g * {cg} + ci) * {kg} + (k - g * {kg})"
                w += [f"              {sp.acc_type} acc = 0;",
                      f"              const int g = k / {kg};",
                      f"              cnt[{3 + j}] += {cg * kr_ * ks_};",
                      f"              for (int ci = 0; ci < {cg}; ci++) for (int kr = 0; kr < {kr_}; kr++) "
                      f"for (int kc = 0; kc < {ks_}; kc++) {{",
                      f"                int ir = r * {st.rows.stride} - {st.rows.pad} + kr * {dh}, "
                      f"ic = c * {st.cols.stride} - {st.cols.pad} + kc * {dw};",
                      f"                if (ir < 0 || ir >= {hin} || ic < 0 || ic >= {win}) continue;",
                      f"                long i = {slot(j, f'g * {cg} + ci', 'ir', 'ic')};",
                      f"                if ({name}_v{j}[i] != {tag(j, f'g * {cg} + ci', 'ir', 'ic')}) cnt[2]++;",
                      f"                acc += ({sp.acc_type})({src}[i]{zp}) * ({sp.acc_type}){wsrc[j]}[{widx}];",
                      "              }"]
            w += [f"              {blk}[((long)(k - {k0}) * br + (r - r0)) * bc + (c - c0)] = acc;", "            }"]
        nblk = f"(long)({khi[j]} - {k0}) * br * bc"
        if sp.epilogue is None:
            if sp.acc_type != sp.out_type:
                raise SpecError(f"fused group {name}: stage {st.name} computes {sp.acc_type} but leaves {sp.out_type} "
                                "without an epilogue")
            w.append(f"        memcpy({out}, {blk}, sizeof({sp.acc_type}) * (size_t)({nblk}));")
        else:
            w += ["        " + ln for ln in sp.epilogue(blk, out, f"({nblk})", "(br * bc)")]
        if j + 1 in join_at and j + 1 != after_heads:
            w_join, out = join_lines(j + 1, out, nblk)
            w += w_join
        dst = f"{name}_b{j + 1}" if j + 1 < n else "y"
        at = "o" if j + 1 < n else mem(n, "k", "r", "c")
        store = f"{dst}[{at}] = {out}[((long)(k - {k0}) * br + (r - r0)) * bc + (c - c0)];"
        store += f" {name}_v{j + 1}[o] = {tag(j + 1, 'k', 'r', 'c')};" if j + 1 < n else " cnt[1]++;"
        w += [f"        for (int k = {k0}; k < {khi[j]}; k++)",
              "          for (int r = r0; r < r1; r++)",
              "            for (int c = c0; c < c1; c++) {",
              f"              long o = {slot(j + 1, 'k', 'r', 'c')};" if j + 1 < n else "",
              f"              {store}", "            }", "        }", "      }"]
        if segment is not None and j == segment[1]:
            w.append("      }   /* the head tiles */")
            if after_heads is not None:
                t = after_heads
                nblk = f"(long){depth[t]} * br * bc"
                w += [f"      {{ /* the add {join_at[t][0].join.name} on the tile's block of tensor {t}, every head */",
                      f"        const int r0 = {name}_RLO{t}[ty], r1 = {name}_RHI{t}[ty], "
                      f"c0 = {name}_CLO{t}[tx], c1 = {name}_CHI{t}[tx];",
                      "        const long br = r1 - r0, bc = c1 - c0;",
                      "        if (br > 0 && bc > 0) {",
                      f"        for (int k = 0; k < {depth[t]}; k++)",
                      "          for (int r = r0; r < r1; r++)",
                      "            for (int c = c0; c < c1; c++) {",
                      f"              long o = {slot(t, 'k', 'r', 'c')};",
                      f"              if ({name}_v{t}[o] != {tag(t, 'k', 'r', 'c')}) cnt[2]++;",
                      f"              {name}_h{t}[((long)k * br + (r - r0)) * bc + (c - c0)] = {name}_b{t}[o];",
                      "            }"]
                w_join, out = join_lines(t, f"{name}_h{t}", nblk)
                w += w_join
                w += [f"        for (int k = 0; k < {depth[t]}; k++)",
                      "          for (int r = r0; r < r1; r++)",
                      "            for (int c = c0; c < c1; c++)",
                      f"              {name}_b{t}[{slot(t, 'k', 'r', 'c')}] = {out}[((long)k * br + (r - r0)) * bc + (c - c0)];",
                      "        }", "      }"]
    w += ["    }", "  }", "}", ""]
    return "\n".join(w)


def _block_program_lines(name: str, j: int, st: Stage, ms: MacStage, sp: StageC,
                         by_shape: dict[tuple[int, int], BlockProgram], types: tuple[str, str, str], weights: str,
                         depth: list[int], height: list[int],
                         width: list[int], slot: Callable[[int, str, str, str], str],
                         tag: Callable[[int, str, str, str], str], blk: str, levels: int,
                         head_tile: int | None = None) -> list[str]:
    """C of a block computed by its tile program (``fused_group_c``'s ``programs``): gather the input window, run
    the program of the block's shape, scatter its output into ``blk`` (channel-major, as the plain loop leaves it),
    count its MACs and its counters per level. ``head_tile``: the block is a head tile's (inside the head loop, its
    first head ``h0``): its programs run the head tile's share of the product (``fusion.stages.head_slice``: batch
    ``head_tile``), reading the input channels of heads h0.. and writing ``blk``'s, which holds that share."""
    op = ms.operator
    names = [o.name for o in op.operands]
    k_in, k_w, k_out = names.index(op.inputs[0].name), names.index(op.inputs[1].name), names.index(op.output.name)
    # token-major products: I[N][C] / A[b][M][K] in, O[N][K] / O[b][M][N] out, on chip channel b * X + x
    dense = op.kind in ("dense", "matmul", "batched_matmul")
    nb = product_batch(ms) or 1
    cg, kg = depth[j] // nb, depth[j + 1] // nb
    kr_, ks_, dh, dw, _ = conv_shape(ms)
    cin, cout = depth[j], depth[j + 1]
    ch0 = "0"               # the block's first input channel
    macs_per_pixel = st.macs_per_pixel
    if head_tile is not None:
        nb, cin, cout = head_tile, cg * head_tile, kg * head_tile
        ch0 = f"h0 * {cg}"
        macs_per_pixel = st.head_slice(head_tile).macs_per_pixel
    win_rows = {r: (r - 1) * st.rows.stride + (kr_ - 1) * dh + 1 for r, _ in by_shape}
    win_cols = {c: (c - 1) * st.cols.stride + (ks_ - 1) * dw + 1 for _, c in by_shape}
    n_in = max(cin * win_rows[r] * win_cols[c] for r, c in by_shape)
    n_out = max(cout * r * c for r, c in by_shape)
    nv = levels * len(op.operands) * 4
    zp = f" - {sp.zero_point}" if sp.zero_point else ""
    lines = [f"        {{ /* the block's multiply-accumulates through its tile mapping's loops and buffers (stage {j}) */",
             f"          static {types[0]} pi[{n_in}]; static {types[2]} po[{n_out}]; static long long lc[{nv}];",
             f"          void *T[{len(op.operands)}]; T[{k_in}] = pi; T[{k_w}] = (void *){weights}; T[{k_out}] = po;"]
    if dense:       # I[b][N][C]: the block's tokens, every input feature of every batch
        lines += [f"          for (int bb = 0; bb < {nb}; bb++) for (int n = 0; n < br; n++) "
                  f"for (int ci = 0; ci < {cg}; ci++) {{",
                  f"            long i = {slot(j, f'{ch0} + bb * {cg} + ci', 'r0 + n', 'c0')};",
                  f"            if ({name}_v{j}[i] != {tag(j, f'{ch0} + bb * {cg} + ci', 'r0 + n', 'c0')}) cnt[2]++;",
                  f"            pi[((long)bb * br + n) * {cg} + ci] = ({types[0]})({name}_b{j}[i]{zp});",
                  "          }"]
    else:           # I[1][C][window rows][window columns], padding as zeros
        wr = f"((br - 1) * {st.rows.stride} + {(kr_ - 1) * dh + 1})"
        wc = f"((bc - 1) * {st.cols.stride} + {(ks_ - 1) * dw + 1})"
        lines += [f"          const long wr = {wr}, wc = {wc};",
                  f"          for (int ci = 0; ci < {cin}; ci++) for (long a = 0; a < wr; a++) "
                  "for (long b = 0; b < wc; b++) {",
                  f"            int ir = r0 * {st.rows.stride} - {st.rows.pad} + (int)a, "
                  f"ic = c0 * {st.cols.stride} - {st.cols.pad} + (int)b;",
                  f"            {types[0]} v = 0;",
                  f"            if (ir >= 0 && ir < {height[j]} && ic >= 0 && ic < {width[j]}) {{",
                  f"              long i = {slot(j, 'ci', 'ir', 'ic')};",
                  f"              if ({name}_v{j}[i] != {tag(j, 'ci', 'ir', 'ic')}) cnt[2]++;",
                  f"              v = ({types[0]})({name}_b{j}[i]{zp});",
                  "            }",
                  "            pi[((long)ci * wr + a) * wc + b] = v;",
                  "          }"]
    lines.append(f"          memset(po, 0, sizeof po[0] * (size_t)({cout} * br * bc));")
    for i, ((r, c), p) in enumerate(sorted(by_shape.items())):
        lines.append(f"          {'else ' if i else ''}if (br == {r} && bc == {c}) {p.function}(T, lc);")
    lines += [f"          for (long i = 0; i < {nv}; i++) {name}_lvl{j}[i] += lc[i];",
              f"          cnt[{3 + j}] += (long long)br * bc * {macs_per_pixel};"]
    if dense:       # O[b][N][K] -> the block's [b * K + k][positions]
        lines.append(f"          for (int bb = 0; bb < {nb}; bb++) for (int k = 0; k < {kg}; k++) "
                     f"for (int n = 0; n < br; n++) {blk}[((long)bb * {kg} + k) * br + n] = "
                     f"({sp.acc_type})po[((long)bb * br + n) * {kg} + k];")
    else:           # O[1][K][rows][columns]: the block's layout
        lines.append(f"          for (long i = 0; i < (long){cout} * br * bc; i++) {blk}[i] = ({sp.acc_type})po[i];")
    lines.append("        }")
    return lines


def _fetch_lines(name: str, j: int, by_shape: dict[tuple[int, int], BlockFetch], weights: str, counter: int) -> list[str]:
    """C run at each block of stage ``j``: the fetch program of the block's shape (``br`` x ``bc``), its bits
    added to counter ``counter``."""
    if not by_shape:
        return []
    first = next(iter(by_shape.values()))
    slots = max(b.operands for b in by_shape.values())
    size = max(b.levels * b.operands * 4 for b in by_shape.values())
    lines = [f"        {{ /* the block's weight fetches, as its tile mapping moves them (stage {j}) */",
             f"          static long long wc[{size}]; void *T[{slots}] = {{0}};",
             f"          T[{first.fetched[0][0]}] = (void *){weights};"]
    for i, ((r, c), b) in enumerate(sorted(by_shape.items())):
        if b.fetched != first.fetched:
            raise SpecError(f"fused group {name}: stage {j}'s block programs fetch different operands")
        lines.append(f"          {'else ' if i else ''}if (br == {r} && bc == {c}) "
                     f"{{ {b.function}(T, wc); cnt[{counter}] += {b.counted_bits('wc')}; }}")
    lines.append("        }")
    return lines


def generate_fused_c(stages: tuple[Stage, ...], macs: dict[int, MacStage], tile_rows: int, tile_cols: int,
                     policies: tuple[str, ...], join: Join | None = None, skip_policy: str = "re-read",
                     inner_joins: tuple[tuple[Join, str], ...] = (), pools: dict[int, str] | None = None,
                     weights: WeightTransfers | None = None, head_tile: int | None = None,
                     programs: BlockPrograms | None = None) -> str:
    """C source of ``accelmap_fused(x, skips, weights, y, counters)``: the group on 64-bit integers, no epilogue;
    with ``inner_joins`` (adds inside the group) and ``join`` (ending it), each add's skip kept on chip or read
    from ``skips[i]`` in memory (the inner joins in order, then the ending one). ``pools[j]``: how pooling stage
    j pools (``POOLS``; max by default; an average divides as C does, truncating). ``weights``: how the weights
    move (``fused_group_c``; its fetch programs are built beside this source, ``WeightTransfers.units``);
    ``head_tile``: attention tiled over heads (``fused_group_c``); ``programs``: the blocks' tile programs
    (``fused_group_c``, built beside this source, ``BlockPrograms.units``), their counters per level returned by
    ``accelmap_levels(j, out)``."""
    specs = tuple(StageC("i64", "i64", weights=f"wts[{j}]", weight_type="i64") if j in macs
                  else StageC("i64", "i64", acc_init="LLONG_MIN", pool=(pools or {}).get(j, "max"))
                  for j in range(len(stages)))

    def add(a: str, b: str, y: str, n: str) -> list[str]:
        return [f"for (long i = 0; i < {n}; i++) {y}[i] = {a}[i] + {b}[i];"]
    jc = JoinC(join, skip_policy, "i64", "i64", add) if join is not None else None
    inner = tuple(JoinC(j, sp, "i64", "i64", add) for j, sp in inner_joins)
    body = fused_group_c("group", stages, macs, tile_rows, tile_cols, policies, specs, "i64", jc, inner, weights,
                         head_tile, programs)
    levels = [f"  if (j == {j}) {{ memcpy(out, group_lvl{j}, sizeof group_lvl{j}); return 0; }}"
              for j in (programs.programs if programs is not None else {})]
    nskip = len(inner) + (join is not None)
    call = f"group(x, {''.join(f'skips[{i}], ' for i in range(nskip))}y, cnt);"
    return "\n".join(["#include <string.h>", "#include <limits.h>", "typedef long long i64;",
                      "static const i64 *const *wts;", body,
                      "int accelmap_fused(const i64 *x, const i64 *const *skips, const i64 *const *weights, i64 *y, "
                      "i64 *cnt) {", "  (void)skips;", "  wts = weights;", f"  {call}", "  return 0;", "}",
                      "int accelmap_levels(int j, long long *out) {", "  (void)out;", *levels, "  return 1;", "}", ""])


def numpy_tensors(stages: tuple[Stage, ...], macs: dict[int, MacStage], x: np.ndarray,
                  weights: dict[int, np.ndarray], adds: dict[int, Callable[[list[np.ndarray]], np.ndarray]] | None = None,
                  pools: dict[int, str] | None = None) -> list[np.ndarray]:
    """Every tensor of the group (its input, then each stage's output, channel-major) computed layer by layer by
    NumPy (64-bit integers): the reference. A matrix product's weight is ``[b][K][N]`` (a dense layer's
    ``[N][K]``). ``adds[t]``: the skip added to tensor ``t`` (a join inside the group), given the tensors so far;
    ``pools`` as ``generate_fused_c`` takes it."""
    a = x.astype(np.int64)
    out_all = [a]
    for j, st in enumerate(stages):
        if adds and j in adds:           # the join inside the group adding to tensor j (the previous stage's output)
            a = out_all[j] = out_all[j] + adds[j](out_all)
        ms = macs.get(j)
        nb = product_batch(ms) if ms is not None else None
        if ms is not None and nb is not None:   # O[b, m, n] = sum_k A[b, m, k] W[b, k, n], channel-major (b * N + n, m, col)
            wk = weights[j].T[None] if weight_out_major(ms) else weights[j]     # a dense layer's W[N][K]
            a = np.einsum("bkn,bkmc->bnmc", wk, a.reshape(nb, -1, *a.shape[1:])).reshape(-1, *a.shape[1:])
            out_all.append(a)
            continue
        if ms is not None:
            op = ms.operator
            wop = op.inputs[1]   # kernel dims of size 1 are not in the operator's weight index
            # a grouped convolution's I[1][G][C][h][w] and O[1][G][K][..]: channel g * C + c, as the group keeps it
            a = reference(op, {op.inputs[0].name: a.reshape(stored_shape(op, op.inputs[0])),
                               wop.name: weights[j].reshape(op.index_extent(wop))})
            a = a.reshape(st.out_depth, st.out_rows, st.out_cols)
            out_all.append(a)
            continue
        pool = (pools or {}).get(j, "max")
        out = np.full((st.out_depth, st.out_rows, st.out_cols), np.iinfo(np.int64).min if pool == "max" else 0,
                      dtype=np.int64)
        taps = np.zeros((st.out_rows, st.out_cols), dtype=np.int64)
        for kr in range(st.rows.span):
            for kc in range(st.cols.span):
                for r in range(st.out_rows):
                    ir = r * st.rows.stride - st.rows.pad + kr
                    if not 0 <= ir < st.in_rows:
                        continue
                    for c in range(st.out_cols):
                        ic = c * st.cols.stride - st.cols.pad + kc
                        if 0 <= ic < st.in_cols:
                            out[:, r, c] = np.maximum(out[:, r, c], a[:, ir, ic]) if pool == "max" else (
                                out[:, r, c] + a[:, ir, ic])
                            taps[r, c] += 1
        if pool != "max":      # C's integer division truncates toward zero
            div = taps if pool == "avg" else np.full_like(taps, st.rows.span * st.cols.span)
            out = np.sign(out) * (np.abs(out) // div)
        a = out
        out_all.append(a)
    return out_all


def run_fused(stages: tuple[Stage, ...], macs: dict[int, MacStage], tile_rows: int, tile_cols: int,
              policies: tuple[str, ...], seed: int = 0, join: Join | None = None,
              skip_policy: str = "re-read", inner_joins: tuple[tuple[Join, str], ...] = (),
              pools: dict[int, str] | None = None, weights: WeightTransfers | None = None,
              head_tile: int | None = None, programs: BlockPrograms | None = None) -> tuple[FusedRun, np.ndarray]:
    """Build and run the group's C on random integers; returns its run and NumPy's output. With ``join``, the
    output plus the skip tensor (the group's tensor ``join.skip``, or random when from outside); with
    ``inner_joins``, each add inside the group the same way on its tensor; ``FusedRun.skip_fetched`` counts the
    skip elements read from memory. With ``weights`` (``codegen.fused_weights.plan_weight_transfers``) the C moves
    the weights as planned and ``FusedRun.weight_bits`` counts the bits fetched per stage (the fetch programs copy
    the weights' elements at the operator's own width, not these 64-bit ones: what is counted is which tiles move)."""
    for p in policies:
        if p not in MODES:
            raise SpecError(f"halo policy {p!r} unknown; choose one of {', '.join(MODES)}")
    rng = np.random.default_rng(seed)
    x = rng.integers(-8, 8, size=(stages[0].in_depth, stages[0].in_rows, stages[0].in_cols), dtype=np.int64)
    wvals = {}
    for j, ms in macs.items():
        r, s, _, _, groups = conv_shape(ms)
        nb = product_batch(ms)
        if nb is None:
            shape: tuple[int, ...] = (stages[j].out_depth, stages[j].in_depth // groups, r, s)
        elif weight_out_major(ms):
            shape = (stages[j].out_depth, stages[j].in_depth)
        else:
            shape = (nb, stages[j].in_depth // nb, stages[j].out_depth // nb)
        wvals[j] = rng.integers(-4, 4, size=shape, dtype=np.int64)
    # matrix products keep their tensors batch-major, then token-major in memory: [batch][rows][cols][channels]
    batches = tensor_batches("group", len(stages), macs)

    def memory(t: np.ndarray, nb: int | None) -> np.ndarray:
        if nb is None:
            return np.ascontiguousarray(t)
        return np.ascontiguousarray(t.reshape(nb, -1, *t.shape[1:]).transpose(0, 2, 3, 1))
    source = generate_fused_c(stages, macs, tile_rows, tile_cols, policies, join, skip_policy, inner_joins, pools,
                              weights, head_tile, programs)
    units = [src for _, src in weights.units()] if weights is not None else []
    units += [src for _, src in programs.units()] if programs is not None else []
    # the fetch programs are small and run once: built unoptimized (about 4x faster to build at -O0)
    lib = ctypes.CDLL(str(compile_shared_units([source, *units], opt="-O0") if units else compile_shared(source)))
    fn = lib.accelmap_fused
    p64 = ctypes.POINTER(ctypes.c_longlong)
    fn.argtypes = [p64, ctypes.POINTER(p64), ctypes.POINTER(p64), p64, p64]
    fn.restype = ctypes.c_int
    last = stages[-1]
    # each join's skip: a tensor of the group (as NumPy computes it, sums of earlier adds included) or random
    skips: dict[int, np.ndarray] = {}

    def skip_of(jn: Join, t: int) -> Callable[[list[np.ndarray]], np.ndarray]:
        def get(tensors: list[np.ndarray]) -> np.ndarray:
            if jn.skip is not None:
                skips[t] = np.ascontiguousarray(tensors[jn.skip])
            else:
                shape = (stages[t - 1].out_depth, stages[t - 1].out_rows, stages[t - 1].out_cols)
                skips[t] = rng.integers(-8, 8, size=shape, dtype=np.int64)
            return skips[t]
        return get
    n = len(stages)
    joins = tuple(j for j, _ in inner_joins) + ((join,) if join is not None else ())
    tensors = numpy_tensors(stages, macs, x, wvals, {j.target(n): skip_of(j, j.target(n)) for j, _ in inner_joins},
                            pools)
    ref = tensors[-1]
    if join is not None:
        ref = ref + skip_of(join, n)(tensors).reshape(ref.shape)
    skip_mem = [memory(skips[j.target(n)], batches[j.target(n)]) for j in joins] or [np.zeros(1, dtype=np.int64)]
    skip_arr = (p64 * len(skip_mem))(*[a.ctypes.data_as(p64) for a in skip_mem])
    y = memory(np.zeros((last.out_depth, last.out_rows, last.out_cols), dtype=np.int64), batches[n])
    cnt = np.zeros(counter_count(n, bool(joins)), dtype=np.int64)
    wl = [np.ascontiguousarray(wvals.get(j, np.zeros(1, dtype=np.int64))) for j in range(len(stages))]
    warr = (p64 * len(wl))(*[a.ctypes.data_as(p64) for a in wl])
    fn(memory(x, batches[0]).ctypes.data_as(p64), skip_arr, warr, y.ctypes.data_as(p64), cnt.ctypes.data_as(p64))
    if (nb := batches[n]) is not None:
        y = np.ascontiguousarray(y.reshape(nb, last.out_rows, last.out_cols, -1).transpose(0, 3, 1, 2)
                                 .reshape(last.out_depth, last.out_rows, last.out_cols))
    w0 = 3 + n + bool(joins)
    levels = None
    if programs is not None:
        levels = {}
        for j, by_shape in programs.programs.items():
            shape = (programs.levels, len(next(iter(by_shape.values())).operator.operands), 4)
            levels[j] = np.zeros(shape, dtype=np.int64)
            lib.accelmap_levels(ctypes.c_int(j), levels[j].ctypes.data_as(p64))
    return FusedRun(y, int(cnt[0]), int(cnt[1]), tuple(int(c) for c in cnt[3:3 + n]), int(cnt[2]),
                    int(cnt[3 + n]) if joins else 0, tuple(int(c) for c in cnt[w0:w0 + n]), levels), ref
