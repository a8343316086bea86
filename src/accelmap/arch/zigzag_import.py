"""Reading ZigZag's (zigzag-dse 3.x) hardware and mapping YAML files.

A ZigZag hardware file lists memories innermost first; each memory names the
memory operands it holds (I1, I2, O), its size in bits, its read/write cost in
pJ per access, its ports (bandwidth in bit/cycle) and the dimensions of the
operational array it *serves* (the array dimensions that share one instance).
Per operand, the listing order is the hierarchy.

We convert that into our accelerator dictionary (the YAML format of
``schema.py``), so a converted file is checked by the same strict schema:

* memory operands become classes through the layer's operand links
  (ZigZag's conv default: I1 -> I, I2 -> W, O -> O);
* a memory's position in our chain of levels is the set of array dimensions
  below it: a fan-out between two levels carries the dimensions that the
  outer one serves and the inner one does not;
* word width = the read ports' largest ``bandwidth_max``: ZigZag charges ``r_cost`` per access of
  that many bits (tpu_like's sram_2MB: 2048 bits; taking ``bandwidth_min``, as earlier versions
  did, priced its reads 32x too high); bandwidth = the largest ``bandwidth_max``;
  access granularity = the ports' smallest ``bandwidth_min``: ZigZag rounds each transfer up to
  whole ``bandwidth_min`` accesses (tpu_like's sram_2MB charges an 8-bit read as 64 bits).

A memory that serves dimensions its position in the chain puts above it (two
memories serving crossing sets of dimensions: rf_2B serving D2 under rf_1B
serving D3, D4) is shared along them (``shared_along``). Where ZigZag says
something the chain cannot (an outer memory serving fewer dimensions than one
below it), the conversion picks the nearest representable position and returns
a note saying so; callers print the notes.

The spatial-mapping constraints of a ZigZag mapping file become, per layer
entry, ``{axis name: [(dim, bound), ...]}``: the loops the mapper must unroll
on that fan-out axis (our axis names are ZigZag's D1, D2, ...; dims use our
conv names, see ``ZIGZAG_DIMS``). ``spatial_mapping_hint`` entries become
``{axis name: [dim, ...]}``: dims the mapper may choose to unroll there.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelmap.arch.accelerator import Accelerator
from accelmap.arch.schema import accelerator_from_dict
from accelmap.errors import SpecError
from accelmap.yaml_io import load_yaml

# ZigZag conv dims -> ours (B batch, OY/OX output rows/cols, FY/FX filter rows/cols).
ZIGZAG_DIMS = {"B": "N", "G": "G", "K": "K", "C": "C", "OY": "P", "OX": "Q", "FY": "R", "FX": "S"}
DEFAULT_LINKS = {"I1": "I", "I2": "W", "O": "O"}   # ZigZag's conv links: W -> I2, I -> I1, O -> O
_MEM_OPERANDS = ("I1", "I2", "O")
_CLASS_ORDER = "IWO"


def is_zigzag_hardware(data: Any) -> bool:
    return isinstance(data, dict) and "memories" in data and "operational_array" in data


def is_zigzag_mapping(data: Any) -> bool:
    return (isinstance(data, list) and bool(data)
            and all(isinstance(e, dict) and "name" in e for e in data)
            and any("spatial_mapping" in e or "spatial_mapping_hint" in e for e in data))


@dataclass(frozen=True)
class _Memory:
    name: str
    index: int                      # listing position, innermost first
    size_bits: int
    classes: tuple[str, ...]
    served: frozenset[str]
    width: int
    read_energy: float
    write_energy: float
    read_bw: int
    write_bw: int
    double_buffered: bool
    register: bool                  # written whole in one access: a register, written at the clock edge
    granularity: int                # smallest bandwidth_min of its ports: ZigZag rounds each transfer up to it
    # served dims above its position in the chain: one instance shared along them (a column's accumulator)
    shared: tuple[str, ...] = ()


def _num(v, where: str, what: str, integer: bool = False):
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or v < 0:
        kind = "a non-negative integer" if integer else "a non-negative number"
        raise SpecError(f"{what} must be {kind}, got {v!r}", where=where)
    return v


def _memory(name: str, mem: Any, index: int, dims: list[str], links: dict[str, str], src: str) -> _Memory:
    where = f"{src}: memories.{name}"
    if not isinstance(mem, dict):
        raise SpecError("a memory must be a mapping with size, r_cost, w_cost, operands, ports, "
                        "served_dimensions", where=where)
    for key in ("size", "operands", "ports", "served_dimensions"):
        if key not in mem:
            raise SpecError(f"'{key}' is required", where=where)
    for key in ("r_cost", "w_cost"):
        if mem.get(key) is None:
            hint = " (auto_cost_extraction needs CACTI, which we do not run)" if mem.get("auto_cost_extraction") else ""
            raise SpecError(f"'{key}' is required{hint}", where=f"{where}.{key}")
    size = _num(mem["size"], f"{where}.size", "size (bits)", integer=True)
    r_cost = _num(mem["r_cost"], f"{where}.r_cost", "r_cost (pJ per access)")
    w_cost = _num(mem["w_cost"], f"{where}.w_cost", "w_cost (pJ per access)")
    ops = mem["operands"]
    if not isinstance(ops, list) or not ops or any(o not in _MEM_OPERANDS for o in ops):
        raise SpecError(f"operands must be a list of I1, I2, O; got {ops!r}", where=f"{where}.operands")
    classes = tuple(sorted({links[o] for o in ops}, key=_CLASS_ORDER.index))
    served = mem["served_dimensions"] or []
    if not isinstance(served, list) or any(d not in dims for d in served):
        raise SpecError(f"served_dimensions {served!r} must name dimensions of the operational array "
                        f"({', '.join(dims)})", where=f"{where}.served_dimensions")
    ports = mem["ports"]
    if not isinstance(ports, list) or not ports:
        raise SpecError("ports must be a non-empty list", where=f"{where}.ports")
    reads, writes = [], []
    for j, p in enumerate(ports):
        pw = f"{where}.ports[{j}]"
        if not isinstance(p, dict) or p.get("type") not in ("read", "write", "read_write"):
            raise SpecError("each port needs type read, write or read_write", where=pw)
        bmin = _num(p.get("bandwidth_min"), f"{pw}.bandwidth_min", "bandwidth_min (bit/cycle)", integer=True)
        bmax = _num(p.get("bandwidth_max"), f"{pw}.bandwidth_max", "bandwidth_max (bit/cycle)", integer=True)
        if bmin < 1 or bmax < bmin:
            raise SpecError(f"need 1 <= bandwidth_min <= bandwidth_max, got {bmin}, {bmax}", where=pw)
        if p["type"] in ("read", "read_write"):
            reads.append((bmin, bmax))
        if p["type"] in ("write", "read_write"):
            writes.append((bmin, bmax))
    if not reads or not writes:
        raise SpecError("a memory needs a read port and a write port (or a read_write port)", where=f"{where}.ports")
    width = max(b for _, b in reads)
    w_word = max(b for _, b in writes)
    # ZigZag charges w_cost per write of the write port's widest access; we charge per word of `width`.
    w_energy = w_cost * width / w_word
    return _Memory(name, index, size, classes, frozenset(served), width, float(r_cost), float(w_energy),
                   max(b for _, b in reads), max(b for _, b in writes),
                   bool(mem.get("force_double_buffering", False)), size <= w_word,
                   min(b for b, _ in reads + writes))


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _level_dict(group: list[_Memory]) -> dict[str, Any]:
    m0 = group[0]
    served = sorted(m0.served)
    d: dict[str, Any] = {
        "name": ".".join(m.name for m in group),
        "holds": [c for c in _CLASS_ORDER if any(c in m.classes for m in group)],
    }
    if len(group) == 1:
        d["capacity"] = f"{m0.size_bits} bit"
    else:
        d["partitions"] = {m.classes[0]: f"{m.size_bits} bit" for m in group}
    d.update({
        "width": f"{m0.width} bit",
        "read_energy": f"{_fmt(m0.read_energy)} pJ",
        "write_energy": f"{_fmt(m0.write_energy)} pJ",
        "read_bandwidth": f"{m0.read_bw} bit/cycle",
        "write_bandwidth": f"{m0.write_bw} bit/cycle",
        "access_granularity": f"{m0.granularity} bit",
        "comment": f"ZigZag memor{'ies' if len(group) > 1 else 'y'} {', '.join(m.name for m in group)}; "
                   f"serves {', '.join(served + list(m0.shared)) if served or m0.shared else 'one multiplier'}",
    })
    if m0.shared:
        # the array dims it serves above its place in the chain: one instance per the other dims' positions
        d["shared_along"] = list(m0.shared)
    if m0.double_buffered:
        d["double_buffered"] = True
    elif m0.register:
        # ZigZag never stalls the array to refill a register: its next value is written at the clock edge
        d["written_at_clock_edge"] = True
    else:
        # ZigZag double-buffers a memory whenever two of the mapping's tiles fit in it; otherwise it
        # refills it during the last iterations that still read it (its top irrelevant loops)
        d["double_buffered"] = "when_fits"
        d["refill_while_read"] = True
    # ZigZag loads a tile that stays for the whole run (period count 1) within the port's spare
    # bandwidth during compute (CostModelEvaluation.calc_loading_single_port_period_count_1)
    d["stream_single_tile"] = True
    return d


def _mergeable(group: list[_Memory], m: _Memory) -> bool:
    """Single-class memories with equal costs at one position become one partitioned level."""
    g = group[0]
    taken = {c for x in group for c in x.classes}
    return (len(m.classes) == 1 and all(len(x.classes) == 1 for x in group) and m.classes[0] not in taken
            and m.served == g.served and m.shared == g.shared and (m.width, m.read_energy, m.write_energy, m.read_bw, m.write_bw,
                                          m.double_buffered, m.register, m.granularity) ==
            (g.width, g.read_energy, g.write_energy, g.read_bw, g.write_bw, g.double_buffered, g.register,
             g.granularity))


def zigzag_to_dict(data: Any, source: str, links: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """A ZigZag hardware description -> (our accelerator dictionary, notes on approximations)."""
    if not is_zigzag_hardware(data):
        raise SpecError("not a ZigZag hardware file: it needs top-level 'memories' and 'operational_array'",
                        where=source)
    links = dict(links or DEFAULT_LINKS)
    notes: list[str] = []
    oa = data["operational_array"]
    if not isinstance(oa, dict):
        raise SpecError("must be a mapping", where=f"{source}: operational_array")
    if oa.get("is_imc"):
        raise SpecError("in-memory-computing arrays (is_imc: true) are not supported; only multiplier arrays",
                        where=f"{source}: operational_array.is_imc")
    dims, sizes = oa.get("dimensions"), oa.get("sizes")
    if not isinstance(dims, list) or not isinstance(sizes, list) or len(dims) != len(sizes) or not dims:
        raise SpecError(f"dimensions {dims!r} and sizes {sizes!r} must be lists of equal length",
                        where=f"{source}: operational_array")
    if not all(isinstance(d, str) for d in dims) or len(set(dims)) != len(dims):
        raise SpecError(f"dimensions {dims!r} must be distinct names (D1, D2, ...)",
                        where=f"{source}: operational_array.dimensions")
    for d, s in zip(dims, sizes, strict=True):
        _num(s, f"{source}: operational_array.sizes", f"size of {d}", integer=True)
        if s < 1:
            raise SpecError(f"size of {d} must be >= 1, got {s}", where=f"{source}: operational_array.sizes")
    if "unit_energy" not in oa:
        raise SpecError("'unit_energy' (pJ per multiply) is required", where=f"{source}: operational_array")
    mac = _num(oa["unit_energy"], f"{source}: operational_array.unit_energy", "unit_energy (pJ)")
    mems_raw = data["memories"]
    if not isinstance(mems_raw, dict) or not mems_raw:
        raise SpecError("must be a non-empty mapping of memory name -> memory", where=f"{source}: memories")
    mems = [_memory(n, m, i, dims, links, source) for i, (n, m) in enumerate(mems_raw.items())]

    # Hierarchy per memory operand: listing order, innermost first.
    chains = {o: [m for m, raw in zip(mems, mems_raw.values(), strict=True) if o in raw["operands"]]
              for o in _MEM_OPERANDS}
    parents: dict[str, set[str]] = {m.name: set() for m in mems}
    for chain in chains.values():
        for inner, outer in itertools.pairwise(chain):
            parents[inner.name].add(outer.name)
    by_name = {m.name: m for m in mems}

    # Array dims below each memory: a root sees the whole array; a parent sees at least its children.
    eff = {m.name: set(m.served) for m in mems}
    for m in mems:
        if not parents[m.name]:
            if eff[m.name] != set(dims):
                notes.append(f"{m.name} is outermost, so it serves the whole array "
                             f"(file says {sorted(m.served) or 'none'})")
            eff[m.name] = set(dims)
    for m in mems:   # listing order is innermost first, so children are final before parents
        for p in parents[m.name]:
            if not eff[m.name] <= eff[p]:
                notes.append(f"{p} sits above {m.name}, so it serves {sorted(eff[p] | eff[m.name])} "
                             f"(file says {sorted(by_name[p].served)})")
                eff[p] |= eff[m.name]
    # A chain of levels puts a fixed order on the array dims; pick the order that keeps most memories exact.
    def exact(order):
        return sum(eff[m.name] == set(order[len(order) - len(eff[m.name]):]) for m in mems)
    order = list(max(itertools.permutations(dims), key=exact))   # first best: the file's order wins ties
    pos = {}
    shared: dict[str, tuple[str, ...]] = {}
    for m in mems:
        k = 0
        while k < len(order) and order[len(order) - 1 - k] in eff[m.name]:
            k += 1
        pos[m.name] = k
        # served dims above its place in the chain: one instance shared along them (ZigZag's rf_2B that a
        # column of multipliers reduces into). Exact: every memory between such a dim's fan-out and this one
        # that holds a class of it is its ancestor, so serves the dim too, and is shared along it (the rule
        # ``schema._shared_axes`` checks)
        shared[m.name] = tuple(d for d in order if d in eff[m.name] and d not in order[len(order) - k:])

    # Outer to inner: a topological order of the chains, outermost position first.
    placed: list[_Memory] = []
    left = {m.name for m in mems}
    while left:
        ready = [by_name[n] for n in left if not (parents[n] & left)]
        nxt = max(ready, key=lambda m: (pos[m.name], m.index))
        placed.append(nxt)
        left.remove(nxt.name)
    placed = [_Memory(m.name, m.index, m.size_bits, m.classes,
                      frozenset(order[len(order) - pos[m.name]:]), m.width, m.read_energy, m.write_energy,
                      m.read_bw, m.write_bw, m.double_buffered, m.register, m.granularity, shared[m.name])
              for m in placed]
    groups: list[list[_Memory]] = []
    for m in placed:
        if groups and _mergeable(groups[-1], m):
            groups[-1].append(m)
        else:
            groups.append([m])
    size_of = dict(zip(dims, sizes, strict=True))
    levels = []
    for gi, g in enumerate(groups):
        lv = _level_dict(g)
        if gi == 0 and lv.get("double_buffered") == "when_fits":
            del lv["double_buffered"]           # the outermost level receives no tiles
            del lv["refill_while_read"]
        k_here = len(g[0].served)
        k_next = len(groups[gi + 1][0].served) if gi + 1 < len(groups) else 0
        axes = order[len(order) - k_here:len(order) - k_next]
        if axes:
            lv["fanout"] = {"transfer_energy": "0 pJ",
                            "axes": [{"name": a, "size": size_of[a], "multicast": True, "reduce": True}
                                     for a in axes]}
        levels.append(lv)
    prec = oa.get("input_precision") or [8, 8]
    name = str(data.get("name") or Path(source).stem)
    out = {
        "name": name,
        "description": f"converted from ZigZag hardware file {Path(source).name}",
        "compute": {"mac_energy": f"{_fmt(float(mac))} pJ", "macs_per_cycle": 1,
                    "precision": {"I": int(prec[0]), "W": int(prec[1]), "O": [16, 32]},
                    # ZigZag writes finished outputs at the activation precision (its O_final)
                    "final_output_bits": int(prec[0])},
        "levels": levels,
        # ZigZag caps a tile's extent along a padded axis at the stored extent (LayerNode.calc_tensor_dim):
        # a tile spanning the whole axis moves the real input only
        "padding": "generated",
    }
    return out, notes


def load_zigzag_accelerator(path: str | Path, mapping: str | Path | None = None) -> tuple[Accelerator, list[str]]:
    """A ZigZag hardware YAML (and optionally its mapping YAML, for operand links) -> our Accelerator."""
    dups: list[str] = []
    links = zigzag_operand_links(load_yaml(mapping, dups), str(mapping)) if mapping else None
    hw_dups: list[str] = []
    d, notes = zigzag_to_dict(load_yaml(path, hw_dups), str(path), links)
    # ZigZag reads its files with PyYAML, where a repeated key's later value wins (its own tpu_like.yaml
    # repeats 'ports'); we read them the same way and say so.
    notes = [f"{path}: {x}" for x in hw_dups] + [f"{mapping}: {x}" for x in dups] + list(notes)
    return accelerator_from_dict(d, f"{path} (converted from ZigZag)"), notes


def _entry(data: Any, source: str, layer: str) -> dict:
    if not is_zigzag_mapping(data):
        raise SpecError("not a ZigZag mapping file: expected a list of entries, each with 'name' and "
                        "'spatial_mapping' or 'spatial_mapping_hint'", where=source)
    entries = {e.get("name"): e for e in data}
    if layer in entries:
        return entries[layer]
    if "default" in entries:
        return entries["default"]
    raise SpecError(f"no entry named {layer!r} and no 'default'; entries: "
                    f"{', '.join(map(str, entries))}", where=source)


def zigzag_operand_links(data: Any, source: str, layer: str = "default") -> dict[str, str]:
    """Memory operand -> our class, from an entry's ``memory_operand_links`` (layer operand -> memory operand)."""
    e = _entry(data, source, layer)
    raw = e.get("memory_operand_links")
    if raw is None:
        return dict(DEFAULT_LINKS)
    where = f"{source}: {e.get('name')}.memory_operand_links"
    if not isinstance(raw, dict) or set(raw) != {"I", "W", "O"} or sorted(raw.values()) != sorted(_MEM_OPERANDS):
        raise SpecError(f"{raw!r} must link each of I, W, O to a distinct one of I1, I2, O", where=where)
    return {mem: cls for cls, mem in raw.items()}


def _dim(name: str) -> str:
    return ZIGZAG_DIMS.get(name, name)


def zigzag_spatial_constraints(data: Any, source: str, layer: str = "default") -> dict[str, list[tuple[str, int]]]:
    """``{axis: [(dim, bound), ...]}``: the unrolling an entry (``layer`` or else 'default') fixes per axis."""
    e = _entry(data, source, layer)
    sm = e.get("spatial_mapping") or {}
    where = f"{source}: {e.get('name')}.spatial_mapping"
    if not isinstance(sm, dict):
        raise SpecError("must map array dimensions (D1, D2, ...) to lists of 'DIM, BOUND'", where=where)
    out: dict[str, list[tuple[str, int]]] = {}
    for axis, items in sm.items():
        items = items if isinstance(items, list) else [items]
        pairs = []
        for it in items:
            parts = [p.strip() for p in str(it).split(",")]
            if len(parts) != 2 or not parts[1].isdigit() or int(parts[1]) < 1:
                raise SpecError(f"{it!r} is not 'DIM, BOUND' with a positive integer bound", where=f"{where}.{axis}")
            pairs.append((_dim(parts[0]), int(parts[1])))
        out[str(axis)] = pairs
    return out


def zigzag_spatial_hints(data: Any, source: str, layer: str = "default") -> dict[str, list[str]]:
    """``{axis: [dim, ...]}``: dims an entry's ``spatial_mapping_hint`` allows on each axis."""
    e = _entry(data, source, layer)
    hints = e.get("spatial_mapping_hint") or {}
    if not isinstance(hints, dict):
        raise SpecError("must map array dimensions to lists of dims", where=f"{source}: {e.get('name')}.spatial_mapping_hint")
    return {str(a): [_dim(str(d)) for d in (v if isinstance(v, list) else [v])] for a, v in hints.items()}


def load_zigzag_spatial_constraints(path: str | Path, layer: str = "default") -> dict[str, list[tuple[str, int]]]:
    return zigzag_spatial_constraints(load_yaml(path, []), str(path), layer)
