"""Rule B45 (docs/mapper.md): the mirror of a padded unrolling searched to the end is not searched again.

Rule S4 (``mirror.py``) skips the mirror of a dividing unrolling once that unrolling's subtree was searched to the
end: a relabelling ``swap`` of dims (P<->Q, R<->S of a convolution symmetric in them, with the accelerator and the
constraints naming them alike) maps every mapping to one of the same cost, and the unrolling of the image is the
relabelled unrolling. It marked classes of equal fan-out products (rule S5), which is argued for dividing unrollings
only, so a padded unrolling (rule E2, searched over Ruby-S tiles) marked nothing and its mirror was searched again
(ResNet-18 layer4.0.downsample on vta_like: K4,P4 and K4,Q4 on the 16-lane axis, P = Q = 7, both padded).

The same argument holds for a padded unrolling U and its exact image U' (each axis's bounds relabelled): the Ruby-S
space of U (U's spatial loops, the last round partial; temporal loops dividing what U leaves of each dim) is mapped
onto the Ruby-S space of U' by the relabelling, since the swapped dims have equal sizes, so U leaves of d what U'
leaves of swap(d), and the validator reads only the operator, the accelerator and the loops' dims, all invariant. A
mapping and its image cost the same (S4's argument: the model reads a mapping only through these), so both subtrees
have the same optimum, and once U's was searched to the end U' cannot improve on the best found. Keys are exact
assignments (per axis, its dims and bounds), not S5's classes.
"""

from __future__ import annotations


def assignment_key(assignment: dict) -> tuple:
    """An unrolling (``SpatialSpace.assignment``: (level, axis) -> {dim: bound}) as a hashable key (bounds of 1
    dropped)."""
    return tuple(sorted((level, axis, d, b) for (level, axis), dims in assignment.items()
                        for d, b in dims.items() if b > 1))


def padded_mirror_keys(assignment: dict, swap: dict[str, str]) -> tuple[tuple, tuple]:
    """(the key of ``assignment``, the key of its image under the dim relabelling ``swap``)."""
    image = {key: {swap.get(d, d): b for d, b in dims.items()} for key, dims in assignment.items()}
    return assignment_key(assignment), assignment_key(image)
