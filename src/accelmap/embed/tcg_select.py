"""Selecting non-overlapping instruction matches for maximal coverage (Rieber's 2022 dissertation, Algorithm 1).

Matches are ordered by root in right-to-left pre-order. Taking a match at root r skips every later
match rooted inside r's covered region (they share r's nodes); the first match rooted outside it
is the continuation (NEXT). A later root outside the region cannot overlap it: in pre-order it is
neither an ancestor of r nor inside r's right-hand subgraph. Per continuation only the best local
choice is kept (MAXINSTR), and "select nothing here" is always a branch (the Null pattern). The
recursion is memoised on the match index, which makes the branch and bound exact and linear in
the number of matches.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from accelmap.embed.tcg import TCG
from accelmap.embed.tcg_match import Match


@dataclass(frozen=True)
class Selection:
    matches: tuple[Match, ...]
    covered: int            # nodes covered (eq. 3.4's numerator)
    nodes: int
    algebraic_covered: int  # compute and reduction nodes covered
    algebraic: int

    @property
    def coverage(self) -> float:
        """C_nodes of eq. 3.4: covered nodes over all nodes."""
        return self.covered / self.nodes

    @property
    def full(self) -> bool:
        """100 % algebraic coverage: every compute and reduction node is inside an instruction."""
        return self.algebraic_covered == self.algebraic

    def __str__(self) -> str:
        picked = ", ".join(str(m) for m in self.matches) or "nothing"
        return (f"coverage {self.coverage:.1%} ({self.covered}/{self.nodes} nodes), algebraic "
                f"{self.algebraic_covered}/{self.algebraic}: {picked}")


def select(tcg: TCG, matches: list[Match]) -> Selection:
    """The selection of non-overlapping matches covering the most nodes (ties: fewer instructions)."""
    ms = sorted(matches, key=lambda m: (m.root, m.instruction))
    roots = [m.root for m in ms]

    def next_index(m: Match) -> int:
        k = roots.index(m.root)
        while k < len(ms) and roots[k] in m.covered:
            k += 1
        return k

    @lru_cache(maxsize=None)
    def best(i: int) -> tuple[int, int, tuple[int, ...]]:
        if i >= len(ms):
            return (0, 0, ())
        # the Null pattern: nothing rooted at this node, continue with the next root
        j = i
        while j < len(ms) and roots[j] == roots[i]:
            j += 1
        choice = best(j)
        for k in range(i, j):
            cov, neg_count, picks = best(next_index(ms[k]))
            cand = (cov + len(ms[k].covered), neg_count - 1, (k,) + picks)
            if cand[:2] > choice[:2]:
                choice = cand
        return choice

    _, _, picks = best(0)
    chosen = tuple(ms[k] for k in picks)
    covered = set().union(*(m.covered for m in chosen)) if chosen else set()
    alg = {n.index for n in tcg.algebraic}
    return Selection(chosen, len(covered), len(tcg), len(alg & covered), len(alg))
