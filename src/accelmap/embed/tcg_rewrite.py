"""Rewrites of a TCG program and the search over them (Rieber's 2022 dissertation, Sec. 3.3 and 3.4.1).

The rewrites act on the program form the TCG is built from, so every result is again a valid TCG:

- canonicalisation by operand swap (Table 3.2): constants to the right, dependent values to the left;
- full fission (Algorithm 2): every compute or reduction nested in another becomes its own statement;
  a reduction's body gets the reduced dimension as an extra tensor dimension (reduction fission);
- loop fusion (Algorithm 3, Fig. 3.12): a statement shares one more outer loop with its predecessor;
- inlining (part of Algorithm 3): a load of an intermediate is replaced by its producing expression;
- input transposes: a load reads a transposed copy of its tensor (a layout transform);
- output transposes: a statement stores its result in another dimension order, its readers follow.

The search applies them in the thesis' fixed order (canonicalise, fission, then fusion and inlining
breadth first) under the four configurations of Table 3.4, deduplicating graphs by their labelled
tree, and matches every graph.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cached_property

from accelmap.embed.tcg import (
    COMMUTATIVE,
    TCG,
    Binary,
    Const,
    Expr,
    IConst,
    Index,
    IOp,
    Iter,
    Load,
    Program,
    Reduce,
    Statement,
    Unary,
    build_tcg,
    expr_text,
    transposed_name,
    with_fused,
)
from accelmap.embed.tcg_match import Instruction, Matcher
from accelmap.embed.tcg_select import Selection, select
from accelmap.errors import SpecError

# ---------------------------------------------------------------- canonicalisation (Table 3.2)


def _swap_commutative(prog: Program, swap: Callable[[Expr, Expr], bool]) -> Program:
    """The program with the operands of every commutative operation swapped where ``swap(left, right)`` says so
    (operands first rewritten the same way, innermost first)."""
    def walk(e: Expr) -> Expr:
        if isinstance(e, Binary):
            a, b = walk(e.left), walk(e.right)
            if e.op in COMMUTATIVE and swap(a, b):
                a, b = b, a
            return Binary(e.op, a, b)
        if isinstance(e, Unary):
            return Unary(e.op, walk(e.x))
        if isinstance(e, Reduce):
            return Reduce(e.op, e.dim, walk(e.body), walk(e.init))
        return e

    return replace(prog, statements=tuple(Statement(s.out, s.dims, walk(s.expr)) for s in prog.statements))


def canonicalise(prog: Program) -> Program:
    produced = {s.out for s in prog.statements}

    def dependent(e: Expr) -> bool:
        return not isinstance(e, (Load, Const)) or (isinstance(e, Load) and e.tensor in produced)

    # Table 3.2: constants go right, operands that depend on an earlier statement go left.
    return _swap_commutative(prog, lambda a, b: (isinstance(a, Const) and not isinstance(b, Const))
                             or (dependent(b) and not dependent(a)))


def operand_swaps(prog: Program) -> list[Program]:
    """Every combination of swapping the operands of commutative nodes whose operands are both
    non-constant (the swaps canonicalisation leaves open; constants stay on the right)."""
    def sites(e: Expr) -> int:
        if isinstance(e, Binary):
            own = int(e.op in COMMUTATIVE and not isinstance(e.left, Const) and not isinstance(e.right, Const))
            return own + sites(e.left) + sites(e.right)
        if isinstance(e, Unary):
            return sites(e.x)
        if isinstance(e, Reduce):
            return sites(e.body) + sites(e.init)
        return 0

    def apply(e: Expr, bits: list[bool]) -> Expr:
        if isinstance(e, Binary):
            swap = e.op in COMMUTATIVE and not isinstance(e.left, Const) and not isinstance(e.right, Const) \
                and bits.pop()
            a, b = apply(e.left, bits), apply(e.right, bits)
            return Binary(e.op, b, a) if swap else Binary(e.op, a, b)
        if isinstance(e, Unary):
            return Unary(e.op, apply(e.x, bits))
        if isinstance(e, Reduce):
            return Reduce(e.op, e.dim, apply(e.body, bits), apply(e.init, bits))
        return e

    n = sum(sites(st.expr) for st in prog.statements)
    out = []
    for combo in itertools.product((False, True), repeat=n):
        bits = list(reversed(combo))
        out.append(replace(prog, statements=tuple(Statement(st.out, st.dims, apply(st.expr, bits))
                                                  for st in prog.statements)))
    return out


# ---------------------------------------------------------------- fission (Algorithm 2)

def _algebraic(e: Expr) -> bool:
    return isinstance(e, (Unary, Binary, Reduce))


def _fresh(prog: Program, base: str) -> str:
    names = {s.out for s in prog.statements}
    k = 1
    while f"{base}{k}" in names:
        k += 1
    return f"{base}{k}"


def fission_once(prog: Program) -> Program | None:
    """Move the first nested algebraic operand of a statement into a statement of its own."""
    for si, st in enumerate(prog.statements):
        found = _split(st.expr, list(st.dims))
        if found is None:
            continue
        inner, dims, rebuild = found
        name = _fresh(prog, f"{st.out}_f")
        new = Statement(name, tuple(dims), inner)
        rest = Statement(st.out, st.dims, rebuild(Load(name, tuple(Iter(d) for d in dims))))
        stmts = prog.statements[:si] + (new, rest) + prog.statements[si + 1:]
        # the moved operation keeps the statement's place in the loop structure; the rest gets a nest of its own
        depths = list(prog.fused or [0] * len(prog.statements))
        return with_fused(replace(prog, statements=stmts), depths[:si + 1] + [0] + depths[si + 1:])
    return None


def _split(e: Expr, dims: list[str]):
    """(operand to move, its dimensions, function putting a load in its place) or None."""
    if isinstance(e, Binary):
        for side in ("left", "right"):
            x = getattr(e, side)
            if _algebraic(x):
                return x, dims, lambda ld, e=e, side=side: replace(e, **{side: ld})
    elif isinstance(e, Unary):
        if _algebraic(e.x):
            return e.x, dims, lambda ld, e=e: replace(e, x=ld)
    elif isinstance(e, Reduce):
        if _algebraic(e.body):   # reduction fission: the body keeps the reduced dimension
            return e.body, dims + [e.dim], lambda ld, e=e: replace(e, body=ld)
        if _algebraic(e.init):
            return e.init, dims, lambda ld, e=e: replace(e, init=ld)
    return None


def full_fission(prog: Program) -> Program:
    """Algorithm 2: apply fission until every statement holds one algebraic operation."""
    while True:
        nxt = fission_once(prog)
        if nxt is None:
            return prog
        prog = nxt


# ---------------------------------------------------------------- inlining (Algorithm 3)

def inline_options(prog: Program) -> list[int]:
    """Statements whose result can be inlined into all its consumers (the last statement is the result)."""
    out = []
    for si, st in enumerate(prog.statements[:-1]):
        users = [u for u in prog.statements[si + 1:] if _loads_of(u.expr, st.out)]
        if users and all(_inlinable(u.expr, st) for u in users):
            out.append(si)
    return out


def _loads_of(e: Expr, name: str) -> list[Load]:
    if isinstance(e, Load):
        return [e] if e.tensor == name else []
    if isinstance(e, Const):
        return []
    if isinstance(e, Unary):
        return _loads_of(e.x, name)
    if isinstance(e, Binary):
        return _loads_of(e.left, name) + _loads_of(e.right, name)
    return _loads_of(e.body, name) + _loads_of(e.init, name)


def _inlinable(e: Expr, producer: Statement) -> bool:
    # The producer's reductions must not capture a dimension the consumer's indices use.
    bound = _reduced_dims(producer.expr)
    return all(len(ld.indices) == len(producer.dims) and not (bound & _index_dims_all(ld.indices))
               for ld in _loads_of(e, producer.out))


def _reduced_dims(e: Expr) -> set[str]:
    if isinstance(e, (Load, Const)):
        return set()
    if isinstance(e, Unary):
        return _reduced_dims(e.x)
    if isinstance(e, Binary):
        return _reduced_dims(e.left) | _reduced_dims(e.right)
    return {e.dim} | _reduced_dims(e.body) | _reduced_dims(e.init)


def _index_dims_all(ixs: tuple[Index, ...]) -> set[str]:
    out: set[str] = set()
    stack = list(ixs)
    while stack:
        ix = stack.pop()
        if isinstance(ix, Iter):
            out.add(ix.dim)
        elif isinstance(ix, IOp):
            stack += [ix.left, ix.right]
    return out


def inline(prog: Program, si: int) -> Program:
    prod = prog.statements[si]

    def subst_index(ix: Index, env: dict[str, Index]) -> Index:
        if isinstance(ix, Iter):
            return env.get(ix.dim, ix)
        if isinstance(ix, IConst):
            return ix
        return IOp(ix.op, subst_index(ix.left, env), subst_index(ix.right, env))

    def subst(e: Expr, env: dict[str, Index]) -> Expr:
        if isinstance(e, Load):
            return Load(e.tensor, tuple(subst_index(i, env) for i in e.indices))
        if isinstance(e, Const):
            return e
        if isinstance(e, Unary):
            return Unary(e.op, subst(e.x, env))
        if isinstance(e, Binary):
            return Binary(e.op, subst(e.left, env), subst(e.right, env))
        inner = {k: v for k, v in env.items() if k != e.dim}
        return Reduce(e.op, e.dim, subst(e.body, inner), subst(e.init, inner))

    def put(e: Expr) -> Expr:
        if isinstance(e, Load):
            if e.tensor != prod.out:
                return e
            return subst(prod.expr, dict(zip(prod.dims, e.indices, strict=True)))
        if isinstance(e, Const):
            return e
        if isinstance(e, Unary):
            return Unary(e.op, put(e.x))
        if isinstance(e, Binary):
            return Binary(e.op, put(e.left), put(e.right))
        return Reduce(e.op, e.dim, put(e.body), put(e.init))

    stmts = [Statement(s.out, s.dims, put(s.expr)) for s in prog.statements[si + 1:]]
    # the statement after the inlined one now follows its predecessor: it shares what all three shared
    depths = list(prog.fused or [0] * len(prog.statements))
    if si + 1 < len(depths):
        depths[si + 1] = min(depths[si], depths[si + 1])
    del depths[si]
    return with_fused(replace(prog, statements=prog.statements[:si] + tuple(stmts)), depths)


# ---------------------------------------------------------------- loop fusion (Algorithm 3, Fig. 3.12)

def fusion_problem(prog: Program) -> str | None:
    """Why the program's loop structure (``prog.fused``) is not a valid fusion, or None.

    Statement i may share its outer ``fused[i]`` loops with statement i-1 when (Sec. 3.3.1) the
    iteration intervals are identical and no data is consumed before it is computed: a statement
    inside a loop shared with an earlier one reads that one's result, along every shared loop, at
    exactly the current iteration (conservative: a read of an earlier iteration would be safe too,
    but no operator here needs one). Both keep at least one loop of their own: the grammar of
    Fig. 3.2 puts the predecessor in a tensor node's left child, which must be a tensor node."""
    sts, sizes = prog.statements, dict(prog.sizes)
    if prog.fused and len(prog.fused) != len(sts):
        return f"{len(prog.fused)} fusion depths for {len(sts)} statements"
    for i, b in enumerate(sts):
        k = prog.shared(i)
        if k == 0:
            continue
        a = sts[i - 1] if i else None
        if a is None or not (k < len(a.dims) and k < len(b.dims)):
            return f"'{b}' cannot share {k} loops with its predecessor and keep one of its own"
        for lvl in range(k):
            if sizes[a.dims[lvl]] != sizes[b.dims[lvl]]:
                return f"loop {lvl} of '{a}' ({a.dims[lvl]}) and of '{b}' ({b.dims[lvl]}) have different sizes"
    for j, b in enumerate(sts):
        common = len(b.dims)
        bound = _reduced_dims(b.expr)
        for i in range(j - 1, -1, -1):
            common = min(common, prog.shared(i + 1))
            if common == 0:
                break
            a = sts[i]
            for ld in _loads_of(b.expr, a.out):
                if len(ld.indices) != len(a.dims) or any(
                        ld.indices[lvl] != Iter(b.dims[lvl]) or b.dims[lvl] in bound for lvl in range(common)):
                    return f"'{b}' reads {a.out} at another iteration of a loop it shares with '{a}'"
    return None


def fusion_options(prog: Program) -> list[int]:
    """Statements whose next outer loop can fuse with their predecessor's (each option fuses one level)."""
    out = []
    depths = list(prog.fused or [0] * len(prog.statements))
    for i in range(1, len(prog.statements)):
        trial = depths.copy()
        trial[i] += 1
        if fusion_problem(with_fused(prog, trial)) is None:
            out.append(i)
    return out


def fuse(prog: Program, i: int) -> Program:
    """Statement i shares one more outer loop with statement i-1."""
    depths = list(prog.fused or [0] * len(prog.statements))
    depths[i] += 1
    out = with_fused(prog, depths)
    problem = fusion_problem(out)
    if problem is not None:
        raise SpecError(f"program {prog.name!r}: cannot fuse statement {i}: {problem}")
    return out


# ---------------------------------------------------------------- input transposes

def transposes(prog: Program, limit: int) -> list[Program]:
    """Every combination of access orders of the multi-dimensional graph inputs (at most ``limit``).

    Intermediates are left alone: their layout is their producer's output order, not a free choice
    of the reader."""
    produced = {s.out for s in prog.statements}
    sites: list[tuple[int, list[int]]] = []
    for si, st in enumerate(prog.statements):
        for li, ld in enumerate(_all_loads(st.expr)):
            if len(ld.indices) > 1 and ld.tensor not in produced:
                sites.append((si, [li, len(ld.indices)]))
    choices = [list(itertools.permutations(range(n))) for _, (_, n) in sites]
    out: list[Program] = []
    for combo in itertools.product(*choices):
        if len(out) >= limit:
            break
        perms: dict[tuple[int, int], tuple[int, ...]] = {
            (si, li): p for (si, (li, _)), p in zip(sites, combo, strict=True)}
        out.append(replace(prog, statements=tuple(
            Statement(s.out, s.dims, _permute(s.expr, si, perms, [0])) for si, s in enumerate(prog.statements))))
    return out


def _all_loads(e: Expr) -> list[Load]:
    if isinstance(e, Load):
        return [e]
    if isinstance(e, Const):
        return []
    if isinstance(e, Unary):
        return _all_loads(e.x)
    if isinstance(e, Binary):
        return _all_loads(e.left) + _all_loads(e.right)
    return _all_loads(e.body) + _all_loads(e.init)


def input_shapes(prog: Program) -> dict[str, list[int]]:
    """The shape of every tensor the program reads but does not produce: the largest index each load reaches, + 1."""
    sizes = dict(prog.sizes)
    produced = {s.out for s in prog.statements}
    shapes: dict[str, list[int]] = {}

    def largest(ix: Index) -> int:   # affine indices with non-negative coefficients: largest at the last points
        if isinstance(ix, Iter):
            return sizes[ix.dim] - 1
        if isinstance(ix, IConst):
            return ix.value
        a, b = largest(ix.left), largest(ix.right)
        return a + b if ix.op == "add" else a * b

    for st in prog.statements:
        for ld in _all_loads(st.expr):
            if ld.tensor not in produced:
                ext = [largest(ix) + 1 for ix in ld.indices]
                shapes[ld.tensor] = [max(a, b) for a, b in zip(shapes.get(ld.tensor, ext), ext, strict=True)]
    return shapes


def _permute(e: Expr, si: int, perms: dict, counter: list[int]) -> Expr:
    # walks loads in the same order as _all_loads
    if isinstance(e, Load):
        p = perms.get((si, counter[0]))
        counter[0] += 1
        if p is None or p == tuple(range(len(p))):
            return e
        return Load(transposed_name(e.tensor, p), tuple(e.indices[k] for k in p))
    if isinstance(e, Const):
        return e
    if isinstance(e, Unary):
        return Unary(e.op, _permute(e.x, si, perms, counter))
    if isinstance(e, Binary):
        left = _permute(e.left, si, perms, counter)
        return Binary(e.op, left, _permute(e.right, si, perms, counter))
    body = _permute(e.body, si, perms, counter)
    return Reduce(e.op, e.dim, body, _permute(e.init, si, perms, counter))


def output_orders(prog: Program, limit: int) -> Iterator[Program]:
    """Every combination of result orders of the statements (Sec. 3.3.1's output transpose: the
    tensor nodes of a statement reordered), at most ``limit``; readers of a result follow its order.

    Loops a statement shares with a neighbour keep their place (fusion fixed them). The last
    statement's result may change order too: the operator's output is then stored transposed."""
    choices = []
    for si, st in enumerate(prog.statements):
        fixed = max(prog.shared(si), prog.shared(si + 1))
        choices.append([tuple(range(fixed)) + tuple(fixed + k for k in p)
                        for p in itertools.permutations(range(len(st.dims) - fixed))])
    for count, combo in enumerate(itertools.product(*choices)):
        if count >= limit:
            return
        order = {st.out: pos for st, pos in zip(prog.statements, combo, strict=True)}

        def load(ld: Load, order=order) -> Load:
            pos = order.get(ld.tensor)
            return ld if pos is None else Load(ld.tensor, tuple(ld.indices[k] for k in pos))

        yield replace(prog, statements=tuple(
            Statement(st.out, tuple(st.dims[k] for k in pos), _map_loads(st.expr, load))
            for st, pos in zip(prog.statements, combo, strict=True)))


def global_layouts(prog: Program) -> list[Program]:
    """Table 3.5: one permutation applied to every tensor of the highest rank (graph inputs read a
    transposed copy, statement results are stored permuted and their readers follow)."""
    if prog.fused:
        raise SpecError(f"program {prog.name!r}: global layouts apply before fusion, not to '{prog}'")
    rank = max([len(s.dims) for s in prog.statements] +
               [len(ld.indices) for s in prog.statements for ld in _all_loads(s.expr)])
    produced = {s.out for s in prog.statements if len(s.dims) == rank}
    out = []
    for perm in itertools.permutations(range(rank)):
        def load(ld: Load, perm=perm) -> Load:
            if len(ld.indices) != rank:
                return ld
            name = ld.tensor if ld.tensor in produced or perm == tuple(range(rank)) else \
                transposed_name(ld.tensor, perm)
            return Load(name, tuple(ld.indices[k] for k in perm))

        out.append(replace(prog, statements=tuple(
            Statement(s.out, tuple(s.dims[k] for k in perm) if len(s.dims) == rank else s.dims,
                      _map_loads(s.expr, load))
            for s in prog.statements)))
    return out


def _map_loads(e: Expr, f) -> Expr:
    if isinstance(e, Load):
        return f(e)
    if isinstance(e, Const):
        return e
    if isinstance(e, Unary):
        return Unary(e.op, _map_loads(e.x, f))
    if isinstance(e, Binary):
        return Binary(e.op, _map_loads(e.left, f), _map_loads(e.right, f))
    return Reduce(e.op, e.dim, _map_loads(e.body, f), _map_loads(e.init, f))


# ---------------------------------------------------------------- the search (Sec. 3.4.1, Table 3.4)

CONFIGS = {1: "swap + mask", 2: "swap + mask + fission", 3: "swap + mask + fusion/inline",
           4: "swap + mask + fission + fusion/inline"}


@dataclass(frozen=True)
class Candidate:
    program: Program
    selection: Selection
    transformations: int   # rewrites applied to reach this graph from the canonical one

    @cached_property
    def tcg(self) -> TCG:
        """The graph the selection refers to, rebuilt on demand (the same node numbering): a search keeps
        hundreds of thousands of candidates, and their trees would take gigabytes."""
        return build_tcg(self.program)


@dataclass(frozen=True)
class SearchResult:
    config: int
    nodes: int                       # of the canonical graph
    candidates: tuple[Candidate, ...]
    seconds: float
    timed_out: bool = False          # stopped by the time limit before the candidate limit or the end

    @property
    def solutions(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if c.selection.full)

    @property
    def solutions_up_to_swaps(self) -> int:
        """Solutions that differ by more than the order of a commutative operation's operands, counted
        once per instruction selection (a swap twin covered by the same instructions is one solution)."""
        return len({(_operands_sorted(c.program), tuple(sorted(m.instruction for m in c.selection.matches)))
                    for c in self.solutions})

    @property
    def hit_rate(self) -> float:
        return len(self.solutions) / len(self.candidates) if self.candidates else 0.0

    def median_transformations(self) -> float | None:
        xs = sorted(c.transformations for c in self.solutions)
        if not xs:
            return None
        mid = len(xs) // 2
        return float(xs[mid]) if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def _operands_sorted(prog: Program) -> Program:
    """The program with every commutative operation's operands in one fixed order (by their text)."""
    return _swap_commutative(prog, lambda a, b: expr_text(b) < expr_text(a))


def graph_key(tcg: TCG) -> tuple:
    """Structural identity of a TCG (labels and shape, not tensor names): the dedup of Algorithm 3."""
    return tuple((n.label, n.parent.index if n.parent else -1) for n in tcg.nodes)


def search(prog: Program, isa: tuple[Instruction, ...], config: int = 4, *, input_transposes: bool = False,
           output_transposes: bool = False, layouts: bool = False, limit: int = 100_000,
           time_limit: float = float("inf")) -> SearchResult:
    """Generate the candidate graphs of a configuration, match and select on each.

    Every graph of the configuration is expanded by all operand swaps and, with
    ``output_transposes``, all result orders of its statements, with ``input_transposes`` all
    access orders of the graph inputs, and with ``layouts`` the global layout permutations of
    Table 3.5 (applied to the program before the search); at most ``limit`` candidates, and no new
    one after ``time_limit`` seconds."""
    if config not in CONFIGS:
        raise SpecError(f"configuration must be one of {sorted(CONFIGS)} (Table 3.4), got {config}", where="config")
    t0 = time.perf_counter()
    base = canonicalise(prog)
    # lazily, so that the limit also stops the rewrite search (inlining combinations grow as 2^statements)
    graphs = ((g, depth + int(k > 0)) for k, start in enumerate(global_layouts(prog) if layouts else [prog])
              for g, depth in _graphs(canonicalise(start), config))
    matcher = Matcher(isa)
    cands: list[Candidate] = []
    seen_keys: set[tuple] = set()
    for g, depth in graphs:
        if len(cands) >= limit:
            break
        variants = (t for sw in operand_swaps(g)
                    for o in (output_orders(sw, limit) if output_transposes else [sw])
                    for t in (transposes(o, limit) if input_transposes else [o]))
        for v in variants:
            if len(cands) >= limit:
                break
            if time.perf_counter() - t0 > time_limit:
                return SearchResult(config, len(build_tcg(base)), tuple(cands), time.perf_counter() - t0, True)
            tcg = build_tcg(v)
            key = graph_key(tcg)
            if key in seen_keys:
                continue
            seen_keys.add(key)
            moved = depth + _differences(g, v)
            cands.append(Candidate(v, select(tcg, matcher.match(tcg)), moved))
    return SearchResult(config, len(build_tcg(base)), tuple(cands), time.perf_counter() - t0)


def _graphs(base: Program, config: int) -> Iterator[tuple[Program, int]]:
    """The graphs of one configuration from a canonical program, with the rewrites that made each."""
    yield base, 0
    start = (base, 0)
    if config in (2, 4):
        fissioned = base
        steps = 0
        while (nxt := fission_once(fissioned)) is not None:
            fissioned, steps = nxt, steps + 1
        start = (canonicalise(fissioned), steps)
        yield start
    if config in (3, 4):
        # Algorithm 3 breadth first. Its fusion set holds every conflict-free combination of options;
        # we apply one option per step, which reaches the same graphs: a combination is a sequence of
        # single options each valid on its own (fewer fused loops only drop constraints, inlinings
        # are taken from the back as in the combination), and the queue goes on from every result.
        # The count of rewrites is then the breadth-first depth. A test checks the two closures agree.
        queue = deque([start])
        seen = {start[0]}
        seen_keys = {graph_key(build_tcg(start[0]))}
        while queue:
            g, depth = queue.popleft()
            rewritten = [fuse(g, i) for i in fusion_options(g)] + [inline(g, si) for si in inline_options(g)]
            for h in map(canonicalise, rewritten):
                if h in seen:
                    continue
                seen.add(h)
                key = graph_key(build_tcg(h))
                if key not in seen_keys:
                    seen_keys.add(key)
                    queue.append((h, depth + 1))
                    yield h, depth + 1


def _differences(a: Program, b: Program) -> int:
    """Swaps and transposes that turn a into b (they keep the statement structure; a load a result
    order changed counts once more, beside the result itself)."""
    def walk(x: Expr, y: Expr) -> int:
        if isinstance(x, Binary) and isinstance(y, Binary):
            return min(walk(x.left, y.left) + walk(x.right, y.right), 1 + walk(x.left, y.right) + walk(x.right, y.left))
        if isinstance(x, Unary) and isinstance(y, Unary):
            return walk(x.x, y.x)
        if isinstance(x, Reduce) and isinstance(y, Reduce):
            return walk(x.body, y.body) + walk(x.init, y.init)
        return int(x != y)

    return sum(walk(s.expr, t.expr) + int(s.dims != t.dims) for s, t in zip(a.statements, b.statements, strict=True))
