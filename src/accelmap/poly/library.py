"""Named subgraphs in the DSL: the paper's running example and its Fig. 9 operator kinds.

``library_subgraph("matmul", M=64, N=64, K=64)`` returns DSL text; sizes are keyword params.
The ten single operators of Fig. 9 (AKG, PLDI 2021): conv, matmul, relu, batch_matmul, cast,
transpose, one_hot, add, bn_reduce (BatchNorm training reduction), bn_update.
"""

from __future__ import annotations

from accelmap.errors import SpecError

LIBRARY: dict[str, tuple[dict[str, int], str]] = {
    "fig3": ({"H": 34, "W": 34, "KH": 3, "KW": 3}, """
        input A[H, W] int32
        input B[KH, KW] int32
        A1[h:H, w:W] = A[h, w] + 1
        C[h:H-KH+1, w:W-KW+1] = sum(A1[h+kh, w+kw] * B[kh, kw], kh=KH, kw=KW)
        D[h:H-KH+1, w:W-KW+1] = abs(C[h, w])
        E[h:H-KH+1, w:W-KW+1] = max(D[h, w], 0)"""),
    "conv": ({"N": 1, "C": 16, "H": 18, "W": 18, "K": 16, "R": 3, "S": 3}, """
        input X[N, C, H, W] float16
        input Wt[K, C, R, S] float16
        Y[n:N, k:K, p:H-R+1, q:W-S+1] = sum(X[n, c, p+r, q+s] * Wt[k, c, r, s], c=C, r=R, s=S)"""),
    "matmul": ({"M": 64, "N": 64, "K": 64}, """
        input A[M, K] float16
        input B[K, N] float16
        C[i:M, j:N] = sum(A[i, k] * B[k, j], k=K)"""),
    "matmul_int": ({"M": 32, "N": 48, "K": 40}, """
        input A[M, K] int8
        input B[K, N] int8
        C[i:M, j:N] = sum(cast(A[i, k], int32) * cast(B[k, j], int32), k=K)"""),
    "relu": ({"N": 16, "D": 1024}, """
        input X[N, D] float16
        Y[n:N, d:D] = max(X[n, d], 0.0)"""),
    "batch_matmul": ({"B": 4, "M": 32, "N": 32, "K": 64}, """
        input A[B, M, K] float16
        input Bm[B, K, N] float16
        C[b:B, i:M, j:N] = sum(A[b, i, k] * Bm[b, k, j], k=K)"""),
    "cast": ({"N": 16, "D": 1024}, """
        input X[N, D] float32
        Y[n:N, d:D] = cast(X[n, d], float16)"""),
    "transpose": ({"N": 64, "D": 128}, """
        input X[N, D] float16
        Y[d:D, n:N] = X[n, d]"""),
    "one_hot": ({"N": 256, "C": 64}, """
        input Idx[N] int32
        Y[n:N, c:C] = select(Idx[n] == c, 1, 0)"""),
    "add": ({"N": 16, "D": 1024}, """
        input X[N, D] float16
        input Z[N, D] float16
        Y[n:N, d:D] = X[n, d] + Z[n, d]"""),
    "bn_reduce": ({"N": 4, "C": 16, "H": 16, "W": 16}, """
        input X[N, C, H, W] float32
        S1[c:C] = sum(X[n, c, h, w], n=N, h=H, w=W)
        S2[c:C] = sum(X[n, c, h, w] * X[n, c, h, w], n=N, h=H, w=W)"""),
    "bn_update": ({"N": 4, "C": 16, "H": 16, "W": 16}, """
        input X[N, C, H, W] float32
        input Mean[C] float32
        input Scale[C] float32
        input Shift[C] float32
        Y[n:N, c:C, h:H, w:W] = (X[n, c, h, w] - Mean[c]) * Scale[c] + Shift[c]"""),
    # Reductions over a non-last axis: the scheduler runs the reduction loop innermost, strided in memory;
    # sinking the fast dimension (AKG's SinkLastAxis) makes the contiguous axis innermost instead.
    "col_sum": ({"N": 64, "D": 256}, """
        input X[N, D] float16
        S[d:D] = sum(X[n, d], n=N)"""),
    "softmax_mid": ({"N": 16, "C": 64, "W": 32}, """
        input X[N, C, W] float32
        M[n:N, w:W] = max(X[n, c, w], c=C)
        E[n:N, c:C, w:W] = exp(X[n, c, w] - M[n, w])
        S[n:N, w:W] = sum(E[n, c, w], c=C)
        Y[n:N, c:C, w:W] = E[n, c, w] / S[n, w]"""),
    # A Table-1-like elementwise chain (bias, ReLU, scale, residual add): 4 ops, one fused kernel.
    "chain": ({"N": 64, "D": 512}, """
        input X[N, D] float16
        input Bias[D] float16
        input R[N, D] float16
        T1[n:N, d:D] = X[n, d] + Bias[d]
        T2[n:N, d:D] = max(T1[n, d], 0.0)
        T3[n:N, d:D] = T2[n, d] * 0.5
        Y[n:N, d:D] = T3[n, d] + R[n, d]"""),
    # Table 1 of the paper gives only op counts, precisions and shapes of its five subgraphs; the op
    # lists below are ours, with the stated op count and precision, at scaled-down shapes.
    "t1_p1": ({"N": 2, "C": 16, "H": 64, "W": 64}, """
        input X[N, C, H, W] float16
        input Sc[C] float16
        input Bi[C] float16
        input R[N, C, H, W] float16
        T1[n:N, c:C, h:H, w:W] = X[n, c, h, w] * Sc[c] + Bi[c]
        T2[n:N, c:C, h:H, w:W] = max(T1[n, c, h, w], 0.0) + R[n, c, h, w]
        Y[n:N, c:C, h:H, w:W] = min(T2[n, c, h, w] * 0.5, 6.0)"""),
    "t1_p4": ({"N": 64, "D": 256}, """
        input X[N, D] float32
        input G[D] float32
        input Bt[D] float32
        Sm[n:N] = sum(X[n, d], d=D)
        Mu[n:N] = Sm[n] * (1.0 / D)
        Xc[n:N, d:D] = X[n, d] - Mu[n]
        Sq[n:N] = sum(Xc[n, d] * Xc[n, d], d=D)
        Rs[n:N] = 1.0 / (Sq[n] * (1.0 / D) + 0.00001)
        Y[n:N, d:D] = Xc[n, d] * Rs[n] * G[d] + Bt[d]"""),
    # Table 1's pattern 2 (21 ops, FP16, (256, 512, 16, 16) in and out, ResNet-50): ours is BatchNorm in training
    # form with ReLU (batch mean and variance as reductions, normalization, scale and shift, ReLU), 8 definitions.
    "t1_p2": ({"N": 2, "C": 16, "H": 8, "W": 8}, """
        input X[N, C, H, W] float16
        input G[C] float16
        input Bt[C] float16
        Sm[c:C] = sum(X[n, c, h, w], n=N, h=H, w=W)
        Mu[c:C] = Sm[c] * (1.0 / (N * H * W))
        Xc[n:N, c:C, h:H, w:W] = X[n, c, h, w] - Mu[c]
        Sq[c:C] = sum(Xc[n, c, h, w] * Xc[n, c, h, w], n=N, h=H, w=W)
        Rs[c:C] = 1.0 / sqrt(Sq[c] * (1.0 / (N * H * W)) + 0.001)
        Y[n:N, c:C, h:H, w:W] = max(Xc[n, c, h, w] * Rs[c] * G[c] + Bt[c], 0.0)"""),
    # Table 1's pattern 3 (15 ops, FP32, (30522, 1024): BERT's vocabulary x hidden): ours is an Adam update of
    # the embedding table (moments, bias correction, step, weight decay), 15 arithmetic ops in 4 definitions.
    "t1_p3": ({"V": 64, "D": 256}, """
        input Wt[V, D] float32
        input Gr[V, D] float32
        input M1[V, D] float32
        input M2[V, D] float32
        Mn[v:V, d:D] = 0.9 * M1[v, d] + 0.1 * Gr[v, d]
        Vn[v:V, d:D] = 0.999 * M2[v, d] + 0.001 * Gr[v, d] * Gr[v, d]
        Up[v:V, d:D] = 0.001 * (Mn[v, d] * 10.0) / (sqrt(Vn[v, d] * 1000.0) + 0.000001)
        Wn[v:V, d:D] = Wt[v, d] - Up[v, d] - 0.0001 * Wt[v, d]"""),
    # Table 1's pattern 5 (9 ops, FP16, (64, 1, 16, 16), MobileNets): ours is a 3x3 depthwise convolution (one
    # channel; the input comes padded, as AKG requires) with BatchNorm folded to scale and shift, and ReLU6.
    "t1_p5": ({"N": 8, "H": 16, "W": 16}, """
        input Xp[N, H+2, W+2] float16
        input K[3, 3] float16
        input Sc[1] float16
        input Bi[1] float16
        Y[n:N, h:H, w:W] = sum(Xp[n, h + kh, w + kw] * K[kh, kw], kh=3, kw=3)
        Z[n:N, h:H, w:W] = min(max(Y[n, h, w] * Sc[0] + Bi[0], 0.0), 6.0)"""),
}


def library_names() -> list[str]:
    return sorted(LIBRARY)


def library_subgraph(name: str, **sizes: int) -> str:
    if name not in LIBRARY:
        raise SpecError(f"no subgraph named {name!r}; built in: {', '.join(library_names())} "
                        "(or give a DSL file)")
    defaults, body = LIBRARY[name]
    unknown = set(sizes) - set(defaults)
    if unknown:
        raise SpecError(f"subgraph {name} has no size {sorted(unknown)[0]!r}; sizes: {', '.join(defaults)}")
    params = {**defaults, **sizes}
    head = [f"name {name}"] + [f"param {p} = {v}" for p, v in params.items()]
    return "\n".join(head + [ln.strip() for ln in body.strip().splitlines()]) + "\n"
