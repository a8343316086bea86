"""The portable C of the host operators, written once into every compiled network.

Shapes and strides arrive as arrays, so one function serves every shape: broadcast binary ops
walk an N-d counter over the output with each input's broadcast strides (0 on a broadcast axis),
transposes walk the output with the input's permuted strides. Float arithmetic is float32, and
the program is built with ``-ffp-contract=off`` so no multiply-add is fused behind our back.

Quantization follows ONNX: QuantizeLinear is ``saturate(round_half_even(x / scale) + zero_point)``;
DequantizeLinear is ``(x - zero_point) * scale``. The requantization after an integer product is
onnxruntime's (MLAS ``MlasRequantizeOutput``): the int32 sum plus the int32 bias, converted to
float, times the float32 scale ``x_scale * w_scale / y_scale``, clamped to the output range less
the zero point, rounded half to even, plus the zero point.
"""

HOST_C = r"""
#define _POSIX_C_SOURCE 199309L
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { T_F32 = 0, T_I8 = 1, T_U8 = 2, T_I16 = 3, T_I32 = 4, T_I64 = 5 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static double get_num(const void *p, int t, long i) {
    switch (t) {
    case T_F32: return ((const float *)p)[i];
    case T_I8: return ((const int8_t *)p)[i];
    case T_U8: return ((const uint8_t *)p)[i];
    case T_I16: return ((const int16_t *)p)[i];
    case T_I32: return ((const int32_t *)p)[i];
    default: return (double)((const int64_t *)p)[i];
    }
}

static void put_int(void *p, int t, long i, long long v) {
    switch (t) {
    case T_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case T_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case T_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case T_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case T_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    default: ((float *)p)[i] = (float)v; break;
    }
}

/* y = a OP b with NumPy broadcasting: sa, sb are the inputs' strides over the output's axes. */
static void bcast_binary(int op, const float *a, const float *b, float *y, int nd, const long *shape,
                         const long *sa, const long *sb) {
    long n = 1, idx[8] = {0};
    for (int d = 0; d < nd; d++) n *= shape[d];
    long ia = 0, ib = 0;
    for (long i = 0; i < n; i++) {
        float x = a[ia], z = b[ib];
        y[i] = op == 0 ? x + z : op == 1 ? x - z : op == 2 ? x * z : op == 3 ? x / z : powf(x, z);
        for (int d = nd - 1; d >= 0; d--) {
            idx[d]++; ia += sa[d]; ib += sb[d];
            if (idx[d] < shape[d]) break;
            ia -= sa[d] * shape[d]; ib -= sb[d] * shape[d]; idx[d] = 0;
        }
    }
}

static float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }
static float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

/* kinds: 0 relu, 1 clip, 2 gelu (erf), 3 gelu (tanh), 4 sigmoid, 5 tanh, 6 exp, 7 sqrt, 8 erf, 9 neg, 10 abs */
static void unary(int kind, const float *x, float *y, long n, float lo, float hi) {
    for (long i = 0; i < n; i++) {
        float v = x[i];
        switch (kind) {
        case 0: y[i] = v > 0.0f ? v : 0.0f; break;
        case 1: y[i] = v < lo ? lo : (v > hi ? hi : v); break;
        case 2: y[i] = gelu_erf(v); break;
        case 3: y[i] = gelu_tanh(v); break;
        case 4: y[i] = 1.0f / (1.0f + expf(-v)); break;
        case 5: y[i] = tanhf(v); break;
        case 6: y[i] = expf(v); break;
        case 7: y[i] = sqrtf(v); break;
        case 8: y[i] = erff(v); break;
        case 9: y[i] = -v; break;
        default: y[i] = fabsf(v); break;
        }
    }
}

/* y = x transposed: ishape is the output's shape, istride the input's stride for each output axis. */
static void transpose(const char *x, char *y, int esize, int nd, const long *oshape, const long *istride) {
    long n = 1, idx[8] = {0}, ix = 0;
    for (int d = 0; d < nd; d++) n *= oshape[d];
    for (long i = 0; i < n; i++) {
        memcpy(y + i * esize, x + ix * esize, esize);
        for (int d = nd - 1; d >= 0; d--) {
            idx[d]++; ix += istride[d];
            if (idx[d] < oshape[d]) break;
            ix -= istride[d] * oshape[d]; idx[d] = 0;
        }
    }
}

/* softmax over the middle axis of [outer, n, inner] */
static void softmax(const float *x, float *y, long outer, long n, long inner) {
    for (long o = 0; o < outer; o++)
        for (long j = 0; j < inner; j++) {
            const float *xp = x + o * n * inner + j;
            float *yp = y + o * n * inner + j;
            float m = xp[0], s = 0.0f;
            for (long k = 1; k < n; k++) if (xp[k * inner] > m) m = xp[k * inner];
            for (long k = 0; k < n; k++) { yp[k * inner] = expf(xp[k * inner] - m); s += yp[k * inner]; }
            for (long k = 0; k < n; k++) yp[k * inner] /= s;
        }
}

/* layer normalization of each row of [outer, n] with scale g and bias b (b may be NULL); a row's elements
   ``stride`` apart (1 in a tensor; a fused block's positions in a channel-major block) */
static void layernorm(const float *x, float *y, long outer, long n, long stride, const float *g, const float *b,
                      float eps) {
    for (long o = 0; o < outer; o++) {
        const float *xp = x + o * n * stride;
        float *yp = y + o * n * stride;
        float mean = 0.0f, var = 0.0f;
        for (long k = 0; k < n; k++) mean += xp[k * stride];
        mean /= (float)n;
        for (long k = 0; k < n; k++) { float d = xp[k * stride] - mean; var += d * d; }
        var /= (float)n;
        float inv = 1.0f / sqrtf(var + eps);
        for (long k = 0; k < n; k++) yp[k * stride] = (xp[k * stride] - mean) * inv * g[k] + (b ? b[k] : 0.0f);
    }
}

/* 2-D max (kind 0) or average (kind 1) pooling of NCHW; pads top, left, bottom, right */
/* max (kind 0) or average pooling; with count_pad the divisor counts the declared padding (pt, pl, pb, pr)
   but not the positions past it that ceil_mode's last window reaches (ONNX, onnxruntime) */
static void pool2d(int kind, const float *x, float *y, long nc, long h, long w, long p, long q, long kh, long kw,
                   long sh, long sw, long dh, long dw, long pt, long pl, long pb, long pr, int count_pad) {
    for (long c = 0; c < nc; c++)
        for (long i = 0; i < p; i++)
            for (long j = 0; j < q; j++) {
                float acc = kind == 0 ? -INFINITY : 0.0f;
                long cnt = 0, span = 0;
                for (long r = 0; r < kh; r++)
                    for (long s = 0; s < kw; s++) {
                        long hi = i * sh + r * dh - pt, wi = j * sw + s * dw - pl;
                        if (hi < h + pb && wi < w + pr) span++;
                        if (hi < 0 || hi >= h || wi < 0 || wi >= w) continue;
                        float v = x[(c * h + hi) * w + wi];
                        if (kind == 0) { if (v > acc) acc = v; } else acc += v;
                        cnt++;
                    }
                y[(c * p + i) * q + j] = kind == 0 ? acc : acc / (float)(count_pad ? span : cnt);
            }
}

static void global_avg(const float *x, float *y, long nc, long hw) {
    for (long c = 0; c < nc; c++) {
        float s = 0.0f;
        for (long k = 0; k < hw; k++) s += x[c * hw + k];
        y[c] = s / (float)hw;
    }
}

/* concatenation of ninputs tensors seen as [outer, chunk_k] into [outer, sum chunk_k] */
static void concat(const char **xs, const long *chunks, int ninputs, char *y, long outer, int esize) {
    long total = 0;
    for (int k = 0; k < ninputs; k++) total += chunks[k];
    for (long o = 0; o < outer; o++) {
        long at = 0;
        for (int k = 0; k < ninputs; k++) {
            memcpy(y + (o * total + at) * esize, xs[k] + o * chunks[k] * esize, chunks[k] * esize);
            at += chunks[k];
        }
    }
}

/* ONNX QuantizeLinear: channel of element i is (i / inner) % nch (nch 1: per tensor) */
static void quantize(const float *x, void *y, int ty, long n, long inner, long nch, const float *scale,
                     const int *zp, int qmin, int qmax) {
    for (long i = 0; i < n; i++) {
        long c = nch > 1 ? (i / inner) % nch : 0;
        float v = nearbyintf(x[i] / scale[c]) + (float)zp[c];
        v = v < (float)qmin ? (float)qmin : (v > (float)qmax ? (float)qmax : v);
        put_int(y, ty, i, (long long)v);
    }
}

/* ONNX DequantizeLinear */
static void dequantize(const void *x, int tx, float *y, long n, long inner, long nch, const float *scale,
                       const int *zp) {
    for (long i = 0; i < n; i++) {
        long c = nch > 1 ? (i / inner) % nch : 0;
        y[i] = (float)((int32_t)get_num(x, tx, i) - zp[c]) * scale[c];
    }
}

/* onnxruntime's requantization of an integer product (MLAS MlasRequantizeOutput) */
static void requantize(const void *acc, int tacc, void *y, int ty, long n, long inner, long nch,
                       const int32_t *bias, const float *scale, int zp, int qmin, int qmax) {
    const float lo = (float)(qmin - zp), hi = (float)(qmax - zp);
    for (long i = 0; i < n; i++) {
        long c = nch > 1 ? (i / inner) % nch : 0;
        int32_t v = (int32_t)get_num(acc, tacc, i);
        if (bias) v += bias[c];
        float f = (float)v * scale[c];
        f = f < lo ? lo : (f > hi ? hi : f);
        put_int(y, ty, i, (long long)nearbyintf(f) + zp);
    }
}

/* onnxruntime's QLinearSoftmax (com.microsoft, CPU kernel) over the middle axis of [outer, n, inner]: a
   table of exp over the 256 steps below the row's maximum, shifted up by log(FLT_MAX / n) - 5 so the float
   sum keeps its precision; the sum in row order; each output nearbyintf(e * floor(1 / y_scale) / sum) plus
   the zero point, saturated above (the result is never below the zero point). */
static void qlinear_softmax(const void *x, int tx, void *y, int ty, long outer, long n, long inner,
                            float x_scale, float y_scale, int y_zp, int qmax) {
    float table[256];
    double shift = log((double)(FLT_MAX / (float)n)) - 5.0;
    shift = (shift > 0.0 ? shift : 0.0) / (double)x_scale;
    for (int i = 0; i < 256; i++) table[i] = (float)exp(((double)i - 255.0 + shift) * (double)x_scale);
    const float ys = floorf(1.0f / y_scale);
    for (long o = 0; o < outer; o++)
        for (long j = 0; j < inner; j++) {
            long base = o * n * inner + j, xmax = (long)get_num(x, tx, base);
            for (long k = 1; k < n; k++) {
                long v = (long)get_num(x, tx, base + k * inner);
                if (v > xmax) xmax = v;
            }
            float sum = 0.0f;
            for (long k = 0; k < n; k++) sum += table[255 - xmax + (long)get_num(x, tx, base + k * inner)];
            for (long k = 0; k < n; k++) {
                float e = table[255 - xmax + (long)get_num(x, tx, base + k * inner)];
                long v = (long)nearbyintf(e * ys / sum) + y_zp;
                put_int(y, ty, base + k * inner, v > qmax ? qmax : v);
            }
        }
}

/* onnxruntime's QLinearGlobalAveragePool (MLAS): each channel's int32 sum less zero point x size, times the
   float32 scale x_scale / (y_scale * size), requantized as MlasRequantizeOutput does */
static void qlinear_global_avg(const void *x, int tx, void *y, int ty, long nc, long size, float x_scale,
                               int x_zp, float y_scale, int y_zp, int qmin, int qmax) {
    const float scale = x_scale / (y_scale * (float)size);
    const float lo = (float)(qmin - y_zp), hi = (float)(qmax - y_zp);
    for (long c = 0; c < nc; c++) {
        int32_t acc = -(int32_t)x_zp * (int32_t)size;
        for (long k = 0; k < size; k++) acc += (int32_t)get_num(x, tx, c * size + k);
        float f = (float)acc * scale;
        f = f < lo ? lo : (f > hi ? hi : f);
        put_int(y, ty, c, (long long)nearbyintf(f) + y_zp);
    }
}

/* onnxruntime's QLinearAdd (com.microsoft) as its x86 AVX2 kernel computes it (MLAS
   MlasQLinearAddKernelAvx2Helper, int8 and uint8 alike): the scale ratios a_scale / y_scale and
   b_scale / y_scale in float32, the fixed part y_zp - (ra * a_zp + rb * b_zp) with the sum contracted into
   one fused multiply-add (as the compiled kernel has it), then fma(a, ra, fma(b, rb, fixed)) per element,
   rounded half to even and saturated. The float reading of the QDQ file (dequantize, add, quantize) can
   land on the other side of a rounding tie. */
static void qlinear_add(const void *a, int ta, const void *b, int tb, void *y, int ty, long n, float a_scale,
                        int a_zp, float b_scale, int b_zp, float y_scale, int y_zp, int qmin, int qmax) {
    const float ra = a_scale / y_scale, rb = b_scale / y_scale;
    const float fixed = (float)y_zp - fmaf(ra, (float)a_zp, rb * (float)b_zp);
    for (long i = 0; i < n; i++) {
        float f = fmaf((float)get_num(a, ta, i), ra, fmaf((float)get_num(b, tb, i), rb, fixed));
        long long v = (long long)nearbyintf(f);
        put_int(y, ty, i, v < qmin ? qmin : (v > qmax ? qmax : v));
    }
}

/* an operand in the accelerator's element type, less its zero point */
static void to_operand(const void *x, int tx, void *y, int ty, long n, int zp) {
    for (long i = 0; i < n; i++) {
        if (ty == T_F32) ((float *)y)[i] = (float)get_num(x, tx, i);
        else put_int(y, ty, i, (long long)get_num(x, tx, i) - zp);
    }
}

/* The scatter of a transposed convolution (col2im): o holds the GEMM's products per group g, input pixel
   (n, ih, iw) and tap (kk, r, s); each lands on output pixel (ih*sh + r*dh - ph, iw*sw + s*dw - pw) of channel
   g*kg + kk when that pixel is inside the output (pads and output padding only crop or extend the output). */
static void col2im(const float *o, float *y, long G, long N, long H, long W, long kg, long R, long S,
                   long OH, long OW, long sh, long sw, long dh, long dw, long ph, long pw) {
    memset(y, 0, sizeof(float) * (size_t)(N * G * kg * OH * OW));
    for (long g = 0; g < G; g++)
        for (long n = 0; n < N; n++)
            for (long ih = 0; ih < H; ih++)
                for (long iw = 0; iw < W; iw++) {
                    const float *row = o + ((g * N + n) * H * W + ih * W + iw) * kg * R * S;
                    for (long kk = 0; kk < kg; kk++) {
                        float *plane = y + ((n * G + g) * kg + kk) * OH * OW;
                        for (long r = 0; r < R; r++) {
                            long oh = ih * sh + r * dh - ph;
                            if (oh < 0 || oh >= OH) continue;
                            for (long s = 0; s < S; s++) {
                                long ow = iw * sw + s * dw - pw;
                                if (ow >= 0 && ow < OW) plane[oh * OW + ow] += row[(kk * R + r) * S + s];
                            }
                        }
                    }
                }
}

static void add_channel_bias(float *y, long n, long inner, long nch, const float *b) {
    for (long i = 0; i < n; i++) y[i] += b[(i / inner) % nch];
}

static void read_exact(FILE *f, void *p, size_t bytes, const char *what) {
    if (fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "error: %s is shorter than expected (%zu bytes needed)\n", what, bytes);
        exit(2);
    }
}

static void write_file(const char *path, const void *p, size_t bytes) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "error: cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}
"""
