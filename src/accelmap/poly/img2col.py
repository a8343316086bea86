"""Convolution as img2col + fractal GEMM on the NC1HWC0 layout (AKG, PLDI 2021, Sec. 4.5, Fig. 7, Eq. 1).

The input is ``X[N, C1, H, W, C0]`` (channels split into C1 blocks of C0 = f = 16, the point dim
innermost), the weights ``Wt[Co, C1, KH, KW, C0]`` with Co a multiple of 16. The GEMM has
M = Ho*Wo (output pixels), N = Co and K = C1*KH*KW*C0, and works on f x f fractal blocks, the unit
the cube multiplies (CUBE_UNIT = 16 in AKG's code):

    S0  Xf[n, mo, ko, mi, ki] = 0                                                   (pad M to a multiple of f)
    S1  Xf[n, (ho*Wo + wo) / 16, (c1*KH + kh)*KW + kw, (ho*Wo + wo) % 16, c0] = X[n, c1, ho*sh + kh, wo*sw + kw, c0]
    S2  Wf[(c1*KH + kh)*KW + kw, no, c0, ni] = Wt[16*no + ni, c1, kh, kw, c0]
    S3  Y[n, no, 16*mo + mi, ni] = 0
    S4  Y[n, no, 16*mo + mi, ni] += Xf[n, mo, ko, mi, ki] * Wf[ko, no, ki, ni]          (fractal GEMM, cube)

``Xf`` is X in the fractal layout ``[N, M_o, K_o, M_i, K_i]`` of Eq. (1): S1 is img2col written
through the quasi-affine split m = 16*M_o + M_i, and its relation from ``Xf`` to ``X`` is Eq. (1) with
the printed ``+ s_h`` read as ``* s_h`` (``eq1_map``; a test checks the isl maps are equal). The
rows M <= m < 16*M_o are zero (the tile is padded to f). ``Wf`` is the weight matrix in 16 x 16
blocks ``[K_o, N_o, K_i, N_i]``. The output ``Y[N, Co/16, 16*M_o, 16]`` is NC1HWC0 with H and W
flattened (its first Ho*Wo rows are the convolution). Each (mo, no, ko) of S4 is one 16 x 16 x 16
block product of the cube. Padding of the convolution itself is not supported (AKG requires it
done beforehand; the ONNX front end writes it as a padded copy).
"""

from __future__ import annotations

import islpy as isl

from accelmap.errors import SpecError
from accelmap.poly.kernel import Access, Affine, Call, Const, FloorDiv, Kernel, Statement, Tensor, check_kernel

F = 16   # the fractal block (CUBE_UNIT in AKG's code) and C0


def _aff(*terms: tuple[str | FloorDiv, int], const: int = 0) -> Affine:
    return Affine(tuple(t for t in terms if t[1]), const)


def conv_fractal_kernel(N: int = 1, C1: int = 1, H: int = 10, W: int = 10, Co: int = 16, KH: int = 3,
                        KW: int = 3, SH: int = 1, SW: int = 1, dtype: str = "float16") -> Kernel:
    for name, v in dict(N=N, C1=C1, H=H, W=W, Co=Co, KH=KH, KW=KW, SH=SH, SW=SW).items():
        if v < 1:
            raise SpecError(f"conv_img2col: {name} must be a positive integer, got {v}")
    if KH > H or KW > W:
        raise SpecError(f"conv_img2col: the {KH}x{KW} kernel is larger than the {H}x{W} input")
    if Co % F:
        raise SpecError(f"conv_img2col: Co = {Co} output channels must be a multiple of {F} (the fractal size; "
                        "NC1HWC0 stores channels in blocks of 16)")
    Ho, Wo = (H - KH) // SH + 1, (W - KW) // SW + 1
    Mo, Ko, No = -(-(Ho * Wo) // F), C1 * KH * KW, Co // F
    acc = "float32" if dtype.startswith("float") else "int32"
    X = Tensor("X", (N, C1, H, W, F), dtype)
    Wt = Tensor("Wt", (Co, C1, KH, KW, F), dtype)
    Xf = Tensor("Xf", (N, Mo, Ko, F, F), dtype)
    Wf = Tensor("Wf", (Ko, No, F, F), dtype)
    Y = Tensor("Y", (N, No, Mo * F, F), acc)
    ko = _aff(("c1", KH * KW), ("kh", KW), ("kw", 1))
    m = _aff(("ho", Wo), ("wo", 1))
    s0 = Statement("S0", (("n", N), ("mo", Mo), ("ko", Ko), ("mi", F), ("ki", F)),
                   Access("Xf", tuple(_aff((d, 1)) for d in ("n", "mo", "ko", "mi", "ki"))), Const(0), "assign")
    s1 = Statement("S1", (("n", N), ("ho", Ho), ("wo", Wo), ("c1", C1), ("kh", KH), ("kw", KW), ("c0", F)),
                   Access("Xf", (_aff(("n", 1)), _aff((FloorDiv(m, F), 1)), ko, _aff((FloorDiv(m, F, True), 1)),
                                 _aff(("c0", 1)))),
                   Access("X", (_aff(("n", 1)), _aff(("c1", 1)), _aff(("ho", SH), ("kh", 1)),
                                _aff(("wo", SW), ("kw", 1)), _aff(("c0", 1)))), "assign")
    s2 = Statement("S2", (("c1", C1), ("kh", KH), ("kw", KW), ("no", No), ("c0", F), ("ni", F)),
                   Access("Wf", (ko, _aff(("no", 1)), _aff(("c0", 1)), _aff(("ni", 1)))),
                   Access("Wt", (_aff(("no", F), ("ni", 1)), _aff(("c1", 1)), _aff(("kh", 1)), _aff(("kw", 1)),
                                 _aff(("c0", 1)))), "assign")
    yi = Access("Y", (_aff(("n", 1)), _aff(("no", 1)), _aff(("mo", F), ("mi", 1)), _aff(("ni", 1))))
    out_dims = (("n", N), ("no", No), ("mo", Mo), ("mi", F), ("ni", F))
    s3 = Statement("S3", out_dims, yi, Const(0), "init")
    prod = Call("*", (Call("cast", (Access("Xf", tuple(_aff((d, 1)) for d in ("n", "mo", "ko", "mi", "ki"))),), acc),
                      Call("cast", (Access("Wf", tuple(_aff((d, 1)) for d in ("ko", "no", "ki", "ni"))),), acc)))
    s4 = Statement("S4", out_dims + (("ko", Ko), ("ki", F)), yi, prod, "update", ("ko", "ki"))
    stmts = (s0, s1, s2, s3, s4)
    k = Kernel("conv_img2col", (X, Wt), (Xf, Wf, Y), stmts, external_schedule=_fractal_tree(stmts))
    check_kernel(k, "conv_img2col")
    return k


def _band(stmts, dims_of, coincident) -> str:
    """A band of the schedule-tree text: member i maps each statement to ``dims_of[statement][i]``."""
    members = []
    for i in range(len(coincident)):
        members.append("{ " + "; ".join(f"{s.name}[{', '.join(s.dim_names)}] -> [({dims_of[s.name][i]})]"
                                        for s in stmts) + " }")
    flags = ", ".join("1" if c else "0" for c in coincident)
    return f'schedule: "[{", ".join(members)}]", permutable: 1, coincident: [ {flags} ]'


def _filter(stmts) -> str:
    return "{ " + "; ".join(f"{s.name}[{', '.join(s.dim_names)}]" for s in stmts) + " }"


def _fractal_tree(stmts) -> str:
    """The external schedule tree of Sec. 4.5 (Fig. 7): img2col and the weight blocks first, then the fractal
    GEMM with an outer band over blocks (n, N_o, M_o, K_o: the order in which the cube takes its tiles) and
    the 16 x 16 x 16 block loops (M_i, N_i, K_i) below it; the init runs at K_o = 0, before the first block
    product."""
    s0, s1, s2, s3, s4 = stmts
    dom = "{ " + "; ".join(s.domain_isl() for s in stmts) + " }"
    simple = [f'{{ filter: "{_filter([s])}", child: {{ {_band([s], {s.name: s.dim_names}, [1] * len(s.dims))} }} }}'
              for s in (s0, s1, s2)]
    outer = _band([s3, s4], {"S3": ("n", "no", "mo", "0"), "S4": ("n", "no", "mo", "ko")}, [1, 1, 1, 0])
    inner = (f'sequence: [ {{ filter: "{_filter([s3])}", child: {{ {_band([s3], {"S3": ("mi", "ni")}, [1, 1])} }} }}, '
             f'{{ filter: "{_filter([s4])}", child: {{ {_band([s4], {"S4": ("mi", "ni", "ki")}, [1, 1, 0])} }} }} ]')
    gemm = f'{{ filter: "{_filter([s3, s4])}", child: {{ {outer}, child: {{ {inner} }} }} }}'
    return f'{{ domain: "{dom}", child: {{ sequence: [ {", ".join(simple + [gemm])} ] }} }}'



def eq1_map(N: int, C1: int, H: int, W: int, KH: int, KW: int, SH: int, SW: int, pad_h: int = 0, pad_w: int = 0,
            ctx: isl.Context | None = None) -> isl.Map:
    """Eq. (1) of the paper: fractal index (N, M_o, K_o, M_i, K_i) of X -> input index (N, C1, Hi, Wi, C0)."""
    Ho, Wo = (H + 2 * pad_h - KH) // SH + 1, (W + 2 * pad_w - KW) // SW + 1
    M = Ho * Wo
    return isl.Map(
        f"{{ Xfrac[a0, a1, a2, a3, a4] -> X[a0, floor(a2 / {KH * KW}), "
        f"floor(({F}*a1 + a3) / {Wo}) * {SH} + (floor(a2 / {KW}) mod {KH}) - {pad_h}, "
        f"(({F}*a1 + a3) mod {Wo}) * {SW} + (a2 mod {KW}) - {pad_w}, a4] : "
        f"0 <= a0 < {N} and 0 <= {F}*a1 + a3 < {M} and 0 <= a3 < {F} and 0 <= a2 < {C1 * KH * KW} "
        f"and 0 <= a4 < {F} }}", context=ctx)
