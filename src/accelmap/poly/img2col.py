"""Convolution as img2col + fractal GEMM on the NC1HWC0 layout (AKG, PLDI 2021, Sec. 4.5, Eq. 1).

The input is ``X[N, C1, H, W, C0]`` (channels split into C1 blocks of C0 = 16, the point dim
innermost), the weights ``Wt[Co, C1, KH, KW, C0]``, the output ``Y[N, Co, Ho, Wo]``. Five statements:

    S0  Xcol[n, ho*Wo + wo, ((c1*KH + kh)*KW + kw)*C0 + c0] = X[n, c1, ho*sh + kh, wo*sw + kw, c0]   (img2col)
    S1  Wcol[((c1*KH + kh)*KW + kw)*C0 + c0, co] = Wt[co, c1, kh, kw, c0]
    S2  Y[n, co, ho, wo] = 0
    S3  Y[n, co, ho, wo] += Xcol[n, ho*Wo + wo, kk] * Wcol[kk, co]                                (GEMM, cube)

so the GEMM has M = Ho*Wo, N = Co, K = C1*KH*KW*C0. The fractal view of Xcol is
``[n, M_o, K_o, M_i, K_i]`` with ``m = 16*M_o + M_i`` and ``kk = 16*K_o + K_i``: K_o enumerates
(c1, kh, kw) and K_i is c0, which is the paper's Eq. (1) (with its printed ``+ s_h`` read as
``* s_h``); ``eq1_map`` writes Eq. (1) as an isl map, and a test checks it equals this img2col.
Padding is not supported (AKG requires it done beforehand).
"""

from __future__ import annotations

import islpy as isl

from accelmap.errors import SpecError
from accelmap.poly.kernel import Access, Affine, Call, Const, Kernel, Statement, Tensor, check_kernel

F = 16   # the fractal block (CUBE_UNIT in AKG's code) and C0


def _aff(*terms: tuple[str, int], const: int = 0) -> Affine:
    return Affine(tuple(t for t in terms if t[1]), const)


def conv_fractal_kernel(N: int = 1, C1: int = 1, H: int = 10, W: int = 10, Co: int = 16, KH: int = 3,
                        KW: int = 3, SH: int = 1, SW: int = 1, dtype: str = "float16") -> Kernel:
    for name, v in dict(N=N, C1=C1, H=H, W=W, Co=Co, KH=KH, KW=KW, SH=SH, SW=SW).items():
        if v < 1:
            raise SpecError(f"conv_img2col: {name} must be a positive integer, got {v}")
    if KH > H or KW > W:
        raise SpecError(f"conv_img2col: the {KH}x{KW} kernel is larger than the {H}x{W} input")
    Ho, Wo = (H - KH) // SH + 1, (W - KW) // SW + 1
    M, K = Ho * Wo, C1 * KH * KW * F
    acc = "float32" if dtype.startswith("float") else "int32"
    X = Tensor("X", (N, C1, H, W, F), dtype)
    Wt = Tensor("Wt", (Co, C1, KH, KW, F), dtype)
    Xcol = Tensor("Xcol", (N, M, K), dtype)
    Wcol = Tensor("Wcol", (K, Co), dtype)
    Y = Tensor("Y", (N, Co, Ho, Wo), acc)
    kk = (("c1", KH * KW * F), ("kh", KW * F), ("kw", F), ("c0", 1))
    s0 = Statement("S0", (("n", N), ("ho", Ho), ("wo", Wo), ("c1", C1), ("kh", KH), ("kw", KW), ("c0", F)),
                   Access("Xcol", (_aff(("n", 1)), _aff(("ho", Wo), ("wo", 1)), _aff(*kk))),
                   Access("X", (_aff(("n", 1)), _aff(("c1", 1)), _aff(("ho", SH), ("kh", 1)),
                                _aff(("wo", SW), ("kw", 1)), _aff(("c0", 1)))), "assign")
    s1 = Statement("S1", (("co", Co), ("c1", C1), ("kh", KH), ("kw", KW), ("c0", F)),
                   Access("Wcol", (_aff(*kk), _aff(("co", 1)))),
                   Access("Wt", tuple(_aff((d, 1)) for d in ("co", "c1", "kh", "kw", "c0"))), "assign")
    yi = Access("Y", tuple(_aff((d, 1)) for d in ("n", "co", "ho", "wo")))
    s2 = Statement("S2", (("n", N), ("co", Co), ("ho", Ho), ("wo", Wo)), yi, Const(0), "init")
    # The GEMM's rows are the output pixels m = ho*Wo + wo; it writes the NCHW output directly.
    prod = Call("*", (Call("cast", (Access("Xcol", (_aff(("n", 1)), _aff(("ho", Wo), ("wo", 1)), _aff(("kk", 1)))),),
                           acc),
                      Call("cast", (Access("Wcol", (_aff(("kk", 1)), _aff(("co", 1)))),), acc)))
    s3 = Statement("S3", (("n", N), ("co", Co), ("ho", Ho), ("wo", Wo), ("kk", K)), yi, prod, "update", ("kk",))
    k = Kernel("conv_img2col", (X, Wt), (Xcol, Wcol, Y), (s0, s1, s2, s3))
    check_kernel(k, "conv_img2col")
    return k


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
