"""The isl scheduler with AKG's option sets, and the fusion groups it forms.

AKG (Zhao et al., PLDI 2021, Sec. 4.1) schedules with isl's Pluto-style ILP (Feautrier as the
fallback) and uses *conservative* affine clustering before tiling, so that the live-out space
and the intermediate spaces come out as separate groups (its Fig. 3(c)); the reverse strategy
then tiles the live-out group and fuses the others back into its tiles.
"""

from __future__ import annotations

from typing import cast

import islpy as isl

from accelmap.errors import SpecError

# Option sets: name -> (description, setter name -> value). "akg" reproduces Fig. 3(c) of the paper.
OPTION_SETS: dict[str, tuple[str, dict[str, int]]] = {
    # AKG tunes option combinations to keep the ILP small (Sec. 8); bounding schedule coefficients to 1
    # cuts the scheduling of the img2col convolution from ~15 s to ~1.4 s here with the same groups.
    "akg": ("Pluto ILP, conservative clustering: outer band coincident, per-component scheduling, "
            "coefficients bounded by 1",
            {"schedule_outer_coincidence": 1, "schedule_whole_component": 0,
             "schedule_maximize_coincidence": 1, "schedule_serialize_sccs": 0, "schedule_max_coefficient": 1}),
    "pluto": ("isl defaults: Pluto ILP with aggressive fusion (may skew and shift)", {}),
    "feautrier": ("Feautrier's algorithm (AKG's fallback)", {"schedule_algorithm": 1}),
    "distribute": ("one statement per group (serialized SCCs): no fusion at all",
                   {"schedule_serialize_sccs": 1}),
}


def make_context(option_set: str) -> isl.Context:
    if option_set not in OPTION_SETS:
        raise SpecError(f"unknown scheduler option set {option_set!r}; valid: {', '.join(OPTION_SETS)}",
                        where="--options")
    ctx = isl.Context()
    for opt, val in OPTION_SETS[option_set][1].items():
        getattr(ctx, f"set_{opt}")(val)
    return ctx


def compute_schedule(domain: isl.UnionSet, deps: isl.UnionMap, raw: isl.UnionMap) -> isl.Schedule:
    """Validity: all dependences; proximity: flow dependences; coincidence: all dependences."""
    sc = (isl.ScheduleConstraints.on_domain(domain).set_validity(deps).set_proximity(raw)
          .set_coincidence(deps))
    return sc.compute_schedule()


def is_type(node: isl.ScheduleNode, *kinds: isl.schedule_node_type) -> bool:
    """Whether ``node`` is of one of ``kinds`` (islpy's stubs type get_type() as int)."""
    t = cast(isl.schedule_node_type, node.get_type())
    return t in kinds


def statements_of(uset: isl.UnionSet) -> tuple[str, ...]:
    names: list[str] = []
    uset.foreach_set(lambda s: names.append(s.get_tuple_name()))
    return tuple(sorted(names, key=lambda n: int(n[1:]) if n[1:].isdigit() else n))


def group_nodes(schedule: isl.Schedule) -> list[isl.ScheduleNode]:
    """The fusion groups: the filters of the outermost sequence/set (one level deeper where a filter holds
    a set or sequence), or the whole tree as one group."""
    top = schedule.get_root().child(0)
    if not is_type(top, isl.schedule_node_type.sequence, isl.schedule_node_type.set):
        return [top]
    out = []
    for i in range(top.n_children()):
        f = top.child(i)
        inner = f.child(0) if f.has_children() else f
        # a filter holding an unordered set or a sequence of statements without a shared band: its parts are
        # groups of their own (each with a band to tile)
        if is_type(inner, isl.schedule_node_type.sequence, isl.schedule_node_type.set):
            out += [inner.child(j) for j in range(inner.n_children())]
        else:
            out.append(f)
    return out


def group_statements(node: isl.ScheduleNode) -> tuple[str, ...]:
    if is_type(node, isl.schedule_node_type.filter):
        return statements_of(node.filter_get_filter())
    return statements_of(node.get_domain())


def subtree_statements(node: isl.ScheduleNode) -> set[str]:
    """The statements a subtree runs: its filters' and its extensions' (the grafted copies)."""
    out: set[str] = set()
    if is_type(node, isl.schedule_node_type.filter):
        out.update(statements_of(node.filter_get_filter()))
    if is_type(node, isl.schedule_node_type.extension):
        out.update(statements_of(node.extension_get_extension().range()))
    for i in range(node.n_children()):
        out |= subtree_statements(node.child(i))
    return out


def next_sequence(node: isl.ScheduleNode, bands: int) -> isl.ScheduleNode | None:
    """The first sequence at or below ``node`` with at most ``bands`` band nodes on the way (single children)."""
    while not is_type(node, isl.schedule_node_type.sequence):
        if is_type(node, isl.schedule_node_type.band):
            bands -= 1
        if node.n_children() != 1 or bands < 0:
            return None
        node = node.child(0)
    return node


def innermost_band(node: isl.ScheduleNode, stmt: str) -> isl.ScheduleNode | None:
    """The last band at or below ``node`` (depth first) whose partial schedule covers ``stmt``: its innermost loops."""
    found = None
    if is_type(node, isl.schedule_node_type.band) \
            and stmt in statements_of(node.band_get_partial_schedule_union_map().domain()):
        found = node
    for i in range(node.n_children()):
        inner = innermost_band(node.child(i), stmt)
        if inner is not None:
            found = inner
    return found
