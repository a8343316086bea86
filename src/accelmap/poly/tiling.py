"""Tile sizes: the tile-spec language of AKG's Fig. 4, the tile map of a band, per-tile footprints.

    stmt_id :: "S_" integer          tile_spec :: tile_size @ buffer
    stmt_spec :: stmt_id : tile_specs    (tile_specs: comma-separated, one per band member)

e.g. ``S_2: 32@UB, 32@UB`` (statements may be separated by newlines or ';'). A statement's
sizes tile the outer band of the fusion group that holds it, member by member; members
without a size stay whole.
"""

from __future__ import annotations

import re

import islpy as isl

from accelmap.errors import SpecError

BUFFERS = ("UB", "L1", "L0A", "L0B", "L0C")
_SPEC = re.compile(r"^\s*S_(\d+)\s*:\s*(.+?)\s*$")
_TILE = re.compile(r"^\s*(\d+)\s*@\s*(\w+)\s*$")


def parse_tile_spec(text: str, where: str = "--tiles") -> dict[str, tuple[tuple[int, str], ...]]:
    """Statement name (S2) -> ((size, buffer), ...) per band member."""
    out: dict[str, tuple[tuple[int, str], ...]] = {}
    for part in re.split(r"[;\n]", text):
        if not part.strip():
            continue
        m = _SPEC.match(part)
        if not m:
            raise SpecError(f"cannot read {part.strip()!r}; write e.g. 'S_2: 32@UB, 32@UB'", where=where)
        specs = []
        for item in m.group(2).split(","):
            t = _TILE.match(item)
            if not t:
                raise SpecError(f"tile spec {item.strip()!r} must be SIZE@BUFFER, e.g. 32@UB", where=where)
            size, buf = int(t.group(1)), t.group(2)
            if size < 1:
                raise SpecError(f"tile size must be >= 1, got {size}", where=where)
            if buf not in BUFFERS:
                raise SpecError(f"buffer {buf!r} unknown; valid: {', '.join(BUFFERS)}", where=where)
            specs.append((size, buf))
        out[f"S{m.group(1)}"] = tuple(specs)
    return out


def member_extents(band: isl.ScheduleNode) -> tuple[tuple[int, int], ...]:
    """(min, max) of every member of a band over the statement instances that reach it."""
    sched = band.band_get_partial_schedule_union_map().intersect_domain(band.get_domain())
    rng = sched.range()
    sets: list[isl.Set] = []
    rng.foreach_set(sets.append)
    s = sets[0]
    return tuple((s.dim_min_val(i).to_python(), s.dim_max_val(i).to_python())
                 for i in range(band.band_n_member()))


def tile_map(band: isl.ScheduleNode, sizes: tuple[int, ...]) -> isl.UnionMap:
    """Instances -> tile coordinates ``T*floor(o/T)``, the values isl's band_tile gives the tile loops."""
    sched = band.band_get_partial_schedule_union_map().intersect_domain(band.get_domain())
    n = len(sizes)
    ins = ", ".join(f"o{i}" for i in range(n))
    outs = ", ".join(f"{t}*floor(o{i}/{t})" for i, t in enumerate(sizes))
    tm = isl.UnionMap(f"{{ [{ins}] -> [{outs}] }}", context=band.get_ctx())
    return sched.apply_range(tm)


def box_sizes(tile_to_data: isl.Map) -> tuple[int, ...]:
    """Extent per axis of the largest per-tile footprint (its bounding box)."""
    pairs = tile_to_data.reverse().apply_range(tile_to_data).deltas()
    return tuple(pairs.dim_max_val(i).to_python() + 1 for i in range(pairs.dim(isl.dim_type.set)))


def per_tensor(umap: isl.UnionMap) -> dict[str, isl.Map]:
    maps: list[isl.Map] = []
    umap.foreach_map(maps.append)
    out: dict[str, isl.Map] = {}
    for m in maps:
        name = m.get_tuple_name(isl.dim_type.out)
        out[name] = out[name].union(m) if name in out else m
    return out
