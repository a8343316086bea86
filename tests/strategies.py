"""Hypothesis strategies: random operators, accelerators and valid mappings."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import strategies as st

from accelmap.arch import accelerator_from_dict, get_accelerator
from accelmap.arch.accelerator import Accelerator, adopt_precision
from accelmap.errors import MappingError
from accelmap.mapping.sampling import random_mapping
from accelmap.workload import conv2d, gemm, parse_expression


def random_operator(rng: random.Random):
    """Sizes drawn uniformly (hypothesis would shrink them towards 1, hiding sliding-window overlap)."""
    kind = rng.choice(["conv", "conv", "dwconv", "gconv", "gemm", "mttkrp", "sddmm", "conv1d"])
    if kind in ("conv", "dwconv", "gconv"):
        r, s = rng.randint(1, 3), rng.randint(1, 3)
        sh, sw, dh, dw = rng.randint(1, 2), rng.randint(1, 2), rng.randint(1, 2), rng.randint(1, 2)
        h = rng.randint(dh * (r - 1) + 1, dh * (r - 1) + 6)
        w = rng.randint(dw * (s - 1) + 1, dw * (s - 1) + 5)
        pad = rng.randint(0, 1)
        if kind == "conv":
            op = conv2d("conv", n=rng.randint(1, 2), c=rng.randint(1, 4), h=h, w=w, k=rng.randint(1, 4), r=r, s=s,
                        stride=(sh, sw), dilation=(dh, dw), padding=pad)
        elif kind == "dwconv":
            c = rng.randint(1, 4)
            op = conv2d("dw", c=c, h=h, w=w, k=c, r=r, s=s, stride=(sh, sw), dilation=(dh, dw),
                        padding=pad, groups=c)
        else:
            op = conv2d("gconv", c=4, h=h, w=w, k=2 * rng.randint(1, 2), r=r, s=s, stride=(sh, sw),
                        padding=pad, groups=2)
    elif kind == "gemm":
        op = gemm("gemm", m=rng.randint(1, 8), n=rng.randint(1, 8), k=rng.randint(1, 8))
    elif kind == "mttkrp":
        op = parse_expression("O[i,j] += A[i,k,l] * B[k,j] * C[l,j]",
                              {d: rng.randint(1, 4) for d in "ijkl"}, name="mttkrp")
    elif kind == "sddmm":
        op = parse_expression("O[i,j] += A[i,j] * B[i,k] * C[k,j]",
                              dict(i=rng.randint(1, 4), j=rng.randint(1, 4), k=rng.randint(1, 5)), name="sddmm")
    else:
        st_ = rng.randint(1, 3)
        op = parse_expression(f"O[k,p] += I[{st_}*p+r] * W[k,r]",
                              dict(k=rng.randint(1, 4), p=rng.randint(1, 8), r=rng.randint(1, 4)), name="conv1d")
    if rng.random() < 0.4:
        op = replace(op, init_output=rng.choice(["zero", "read"]))
    return op


def refill_machine(rng: random.Random):
    """A small three-level machine whose buffers refill while read (``refill_while_read``): DRAM (a random read
    port), a 4-32 B buffer double-buffered when two tiles fit and refilled while a tile read once is read, with a
    fan-out of two (multicast and reduction drawn), and under it a 1-4 B level double-buffered when two tiles fit,
    refilled while read or not; kept classes, bypass and DMA setup drawn. Its capacities are small, so two tiles
    often do not fit and the loop order decides whether a level stalls (rule O4 of docs/mapper.md)."""
    def holds():
        return rng.choice([["W"], ["I"], ["O"], ["I", "W"], ["W", "O"], ["I", "O"], ["I", "W", "O"]])
    dram = {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit",
            "read_energy": "20 pJ"}
    if rng.random() < 0.5:
        dram["read_bandwidth"] = f"{rng.choice([1, 2])} words/cycle"
    buf = {"name": "Buf", "holds": holds(), "capacity": f"{rng.choice([4, 8, 12, 16, 32])} B", "width": "8 bit",
           "read_energy": "2 pJ", "write_bandwidth": f"{rng.choice([1, 2])} words/cycle",
           "double_buffered": "when_fits", "refill_while_read": True, "bypass": rng.random() < 0.5,
           "transfer_setup_cycles": rng.choice([0, 2, 8])}
    if rng.random() < 0.6:
        buf["fanout"] = {"axes": [{"name": "X", "size": 2, "multicast": rng.random() < 0.7,
                                   "reduce": rng.random() < 0.7}], "transfer_energy": "1 pJ"}
    reg = {"name": "Reg", "holds": holds(), "capacity": f"{rng.choice([1, 2, 4])} B", "width": "8 bit",
           "read_energy": "0.1 pJ", "double_buffered": "when_fits", "refill_while_read": rng.random() < 0.7,
           "bypass": True, "transfer_setup_cycles": rng.choice([0, 1])}
    return accelerator_from_dict({"name": "refill3", "compute": {"mac_energy": "1 pJ"}, "levels": [dram, buf, reg]})


def small_operator(rng: random.Random):
    """A small GEMM, strided conv1d or SDDMM (at most 72 MACs), for searches compared with exhaustive ones."""
    kind = rng.choice(["gemm", "gemm", "conv1d", "sddmm"])
    if kind == "gemm":
        return gemm("g", m=rng.choice([1, 2, 3, 4]), n=rng.choice([2, 3, 4]), k=rng.choice([2, 4, 6]))
    if kind == "conv1d":
        s = rng.choice([1, 2])
        return parse_expression(f"O[k,p] += I[{s}*p+r] * W[k,r]",
                                {"k": rng.choice([1, 2, 3]), "p": rng.choice([2, 3, 4]), "r": rng.choice([2, 3])},
                                name="conv1d")
    return parse_expression("O[i,j] += A[i,j] * B[i,k] * C[k,j]",
                            {"i": 2, "j": rng.choice([2, 3]), "k": rng.choice([2, 3])}, name="sddmm")


def random_perfect_mappings(seed: int, draws: int, presets: list[str], draw_arch=None):
    """(rng, arch, operator, mapping) of random valid perfectly factored mappings, cycling through ``presets`` (or
    an accelerator ``draw_arch(rng)`` draws each time); the rng is the one that drew them, for tests that draw more
    from it."""
    rng = random.Random(seed)
    for n in range(draws):
        arch = draw_arch(rng) if draw_arch else get_accelerator(presets[n % len(presets)])
        op = adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=30)
        except MappingError:
            continue
        yield rng, arch, op, m


def fixed_at_and_above(op, m, level):
    """The mapping's loops at ``level`` and above (what a search node has fixed) and the sizes left below."""
    fixed = tuple(l for l in m.loops if l.level >= level)
    rem = dict(op.sizes)
    for l in fixed:
        rem[l.dim] //= l.bound
    return fixed, rem


@st.composite
def operators(draw):
    return random_operator(random.Random(draw(st.integers(0, 2 ** 31))))


@st.composite
def accelerators(draw):
    nlev = draw(st.sampled_from([1, 2, 2, 3, 3, 3]))
    levels = []
    axis_no = 0
    for i in range(nlev):
        holds = ["I", "W", "O"] if i == 0 else draw(
            st.lists(st.sampled_from(["I", "W", "O"]), min_size=1, max_size=3, unique=True))
        lv = {"name": f"L{nlev - i}", "holds": holds, "capacity": "unbounded", "width": "16 bit",
              "read_energy": f"{draw(st.integers(1, 50))} pJ", "write_energy": f"{draw(st.integers(1, 50))} pJ",
              "bypass": draw(st.booleans()) if i else True}
        # Latency features: port bandwidths, double buffering and DMA setup (level 0 is the source).
        if draw(st.booleans()):
            lv["read_bandwidth"] = f"{draw(st.sampled_from([4, 8, 16, 32, 64]))} bit/cycle"
        if draw(st.booleans()):
            lv["write_bandwidth"] = f"{draw(st.sampled_from([4, 8, 16, 32, 64]))} bit/cycle"
        if i:
            # double buffering: always, never, when the mapping's tiles fit twice; or a register
            # refilled at the clock edge
            buffering = draw(st.sampled_from([False, True, "when_fits", "clock_edge"]))
            if buffering == "clock_edge":
                lv["written_at_clock_edge"] = True
            else:
                lv["double_buffered"] = buffering
            if buffering == "when_fits":
                # where two tiles do not fit: refilled while a tile read once is read, or stalled
                lv["refill_while_read"] = draw(st.booleans())
            lv["transfer_setup_cycles"] = draw(st.sampled_from([0, 0, 1, 5]))
            # a tile kept for the whole run streams in during compute, or is loaded whole before it
            lv["stream_single_tile"] = draw(st.booleans())
            # access granularity: the compute side's accesses are rounded up to whole granules
            granularity = draw(st.sampled_from([None, None, 4, 8, 16]))
            if granularity is not None:
                lv["access_granularity"] = f"{granularity} bit"
        above = levels[-1].get("fanout") if levels else None
        if above and draw(st.booleans()):
            # one instance shared along some axes of the fan-out just above (a column's accumulator)
            lv["shared_along"] = draw(st.lists(st.sampled_from([a["name"] for a in above["axes"]]),
                                               min_size=1, unique=True))
        naxes = draw(st.integers(0, 2))
        if naxes:
            axes = []
            for _ in range(naxes):
                axes.append({"name": f"A{axis_no}", "size": draw(st.integers(2, 4)),
                             "multicast": draw(st.booleans()), "reduce": draw(st.booleans())})
                axis_no += 1
            lv["fanout"] = {"axes": axes, "transfer_energy": "1 pJ"}
        levels.append(lv)
    compute = {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 32},
               "macs_per_cycle": draw(st.sampled_from([1, 1, 2]))}
    if draw(st.booleans()):
        compute["final_output_bits"] = draw(st.sampled_from([8, 16]))   # finished outputs requantized
    if draw(st.booleans()):
        # Eq. 4.1-style pipeline overheads; the streamed dims are names some operators use
        compute["pipeline"] = {"row_setup_cycles": draw(st.integers(0, 3)),
                               "result_overhead_cycles": draw(st.integers(0, 3)),
                               "streamed_dims": draw(st.lists(st.sampled_from(["C", "R", "S", "k", "r"]),
                                                              unique=True, max_size=3))}
    spec = {"name": "random", "levels": levels, "compute": compute}
    if draw(st.booleans()):
        spec["padding"] = "generated"     # a tile spanning a whole padded axis moves the stored rows only
    return accelerator_from_dict(spec)


@st.composite
def mapped_problems(draw, imperfect=None):
    op = draw(operators())
    arch = draw(accelerators())
    seed = draw(st.integers(0, 2 ** 31))
    imp = draw(st.booleans()) if imperfect is None else imperfect
    m = random_mapping(op, arch, random.Random(seed), imperfect=imp)
    return op, arch, m


def three_level_machine(mid: dict, inner: dict, bw) -> Accelerator:
    """A small 8-bit accelerator: DRAM (ports drawn by ``bw()``, read then write) over the levels ``mid`` and
    ``inner`` (YAML dicts), for the bound tests' random machines."""
    return accelerator_from_dict({"name": "small", "compute": {"mac_energy": "1 pJ", "precision": {
        "I": 8, "W": 8, "O": 8}}, "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit", "read_energy": "100 pJ",
         "write_energy": "100 pJ", "read_bandwidth": bw(), "write_bandwidth": bw()}, mid, inner]})

