"""Header-only C++ emulation of the AI-Engine-like intrinsics the emitted kernels call.

It implements exactly the semantics of ``accelmap.vector.intrinsics`` (the NumPy emulator), so a kernel compiled
on the host and run against it must agree bit for bit with the emulator and with the NumPy reference."""

AIE_EMULATION_HEADER = r"""
// Host emulation of AI-Engine-like vector intrinsics (accelmap). Semantics: lane/column selection after the
// public description of the first-generation AI Engine intrinsics (UG1079); int16 X data at 32-bit granularity
// with lane-pair offsets and a 2x2 square; indices wrap modulo the buffer; srs truncates and saturates.
#include <cstdint>
#include <cstdlib>
#include <cstdio>

#define chess_loop_range(lo, hi)
#define chess_prepare_for_pipelining

template <typename T, int N> struct vec { T v[N]; };
typedef vec<int16_t, 8> v8int16;   typedef vec<int16_t, 16> v16int16;
typedef vec<int16_t, 32> v32int16; typedef vec<int16_t, 64> v64int16;
typedef vec<int32_t, 4> v4int32;   typedef vec<int32_t, 8> v8int32;
typedef vec<int32_t, 16> v16int32; typedef vec<int32_t, 32> v32int32;
struct v16acc48 { int64_t v[16]; };
struct v8acc48 { int64_t v[8]; };
struct v8acc80 { int64_t v[8]; };

static inline int nib_(unsigned w, int i) { return (int)((w >> (4 * i)) & 0xF); }
static inline int wrapi_(int i, int n) { int r = i % n; return r < 0 ? r + n : r; }
static inline int64_t wrap48_(int64_t x) {
    const int64_t half = (int64_t)1 << 47;
    return (int64_t)(((uint64_t)(x + half)) & (((uint64_t)1 << 48) - 1)) - half;
}
static inline void fail_(const char* what, long v) {
    std::fprintf(stderr, "aie emulation: %s %ld\n", what, v);
    std::abort();
}

template <int N, typename T> static inline vec<T, N> load_v(const T* base, long off) {
    if ((off * (long)sizeof(T)) % 16) fail_("unaligned load at element", off);
    vec<T, N> r; for (int i = 0; i < N; i++) r.v[i] = base[off + i]; return r;
}
template <typename T, int N> static inline void store_v(T* base, long off, const vec<T, N>& x) {
    if ((off * (long)sizeof(T)) % 16) fail_("unaligned store at element", off);
    for (int i = 0; i < N; i++) base[off + i] = x.v[i];
}
// A grouped register zero-extended to a wider X buffer, and a Z window (a 256-bit part) of a register.
template <int M, typename T, int N> static inline vec<T, M> widen(const vec<T, N>& x) {
    vec<T, M> r; for (int i = 0; i < M; i++) r.v[i] = i < N ? x.v[i] : (T)0; return r;
}
template <int M, typename T, int N> static inline vec<T, M> window(const vec<T, N>& x, int first) {
    vec<T, M> r; for (int i = 0; i < M; i++) r.v[i] = first + i < N ? x.v[first + i] : (T)0; return r;
}

// int16 pair rule: lane pair p reads 32-bit words at xstart + 2*o_even and xstart + 2*(o_even + o_odd + 1);
// the square picks, for (even col 0, even col 1, odd col 0, odd col 1), one of the four 16-bit values.
static inline void pair_index_(int xstart, int oe, int oo, unsigned xsquare, int step, int idx[4]) {
    int be = xstart + 2 * oe + step, bo = xstart + 2 * (oe + oo + 1) + step;
    int vals[4] = {be, be + 1, bo, bo + 1};
    for (int k = 0; k < 4; k++) idx[k] = vals[nib_(xsquare, k) & 3];
}

template <int XN> static inline v16acc48 mac16(v16acc48 acc, const vec<int16_t, XN>& x, int xstart, unsigned xoffsets,
        unsigned xoffsets_hi, unsigned xsquare, const v16int16& z, int zstart, unsigned zoffsets, unsigned zoffsets_hi,
        int zstep) {
    if (xstart % 2) fail_("mac16 odd xstart", xstart);
    for (int p = 0; p < 8; p++) {
        unsigned w = p < 4 ? xoffsets : xoffsets_hi;
        int idx[4]; pair_index_(xstart, nib_(w, 2 * (p % 4)), nib_(w, 2 * (p % 4) + 1), xsquare, 0, idx);
        for (int h = 0; h < 2; h++) {
            int l = 2 * p + h;
            int zo = l < 8 ? nib_(zoffsets, l) : nib_(zoffsets_hi, l - 8);
            int64_t s = acc.v[l];
            for (int c = 0; c < 2; c++)
                s += (int64_t)x.v[wrapi_(idx[2 * h + c], XN)] * (int64_t)z.v[wrapi_(zstart + zo + c * zstep, 16)];
            acc.v[l] = wrap48_(s);
        }
    }
    return acc;
}
template <int XN> static inline v16acc48 mul16(const vec<int16_t, XN>& x, int xstart, unsigned xoffsets,
        unsigned xoffsets_hi, unsigned xsquare, const v16int16& z, int zstart, unsigned zoffsets, unsigned zoffsets_hi,
        int zstep) {
    v16acc48 a = {};
    return mac16(a, x, xstart, xoffsets, xoffsets_hi, xsquare, z, zstart, zoffsets, zoffsets_hi, zstep);
}

template <int XN> static inline v8acc48 mac8(v8acc48 acc, const vec<int16_t, XN>& x, int xstart, unsigned xoffsets,
        int xstep, unsigned xsquare, const v16int16& z, int zstart, unsigned zoffsets, int zstep) {
    if (xstart % 2) fail_("mac8 odd xstart", xstart);
    if (xstep % 2) fail_("mac8 odd xstep", xstep);
    for (int p = 0; p < 4; p++) {
        for (int q = 0; q < 2; q++) {
            int idx[4]; pair_index_(xstart, nib_(xoffsets, 2 * p), nib_(xoffsets, 2 * p + 1), xsquare, q * xstep, idx);
            for (int h = 0; h < 2; h++) {
                int l = 2 * p + h;
                int64_t s = acc.v[l];
                for (int c = 0; c < 2; c++) {
                    int col = 2 * q + c;
                    s += (int64_t)x.v[wrapi_(idx[2 * h + c], XN)]
                         * (int64_t)z.v[wrapi_(zstart + nib_(zoffsets, l) + col * zstep, 16)];
                }
                acc.v[l] = wrap48_(s);
            }
        }
    }
    return acc;
}
template <int XN> static inline v8acc48 mul8(const vec<int16_t, XN>& x, int xstart, unsigned xoffsets, int xstep,
        unsigned xsquare, const v16int16& z, int zstart, unsigned zoffsets, int zstep) {
    v8acc48 a = {};
    return mac8(a, x, xstart, xoffsets, xstep, xsquare, z, zstart, zoffsets, zstep);
}

template <int XN> static inline v8acc80 lmac8(v8acc80 acc, const vec<int32_t, XN>& x, int xstart, unsigned xoffsets,
        const v8int32& z, int zstart, unsigned zoffsets) {
    for (int l = 0; l < 8; l++)
        acc.v[l] += (int64_t)x.v[wrapi_(xstart + nib_(xoffsets, l), XN)]
                    * (int64_t)z.v[wrapi_(zstart + nib_(zoffsets, l), 8)];
    return acc;
}
template <int XN> static inline v8acc80 lmul8(const vec<int32_t, XN>& x, int xstart, unsigned xoffsets,
        const v8int32& z, int zstart, unsigned zoffsets) {
    v8acc80 a = {};
    return lmac8(a, x, xstart, xoffsets, z, zstart, zoffsets);
}

template <typename T, int N, typename A> static inline vec<T, N> srs_(const A& acc, int shift) {
    const int64_t hi = ((int64_t)1 << (8 * sizeof(T) - 1)) - 1, lo = -hi - 1;
    vec<T, N> r;
    for (int i = 0; i < N; i++) { int64_t v = acc.v[i] >> shift; r.v[i] = (T)(v < lo ? lo : v > hi ? hi : v); }
    return r;
}
static inline v16int16 srs(const v16acc48& a, int shift) { return srs_<int16_t, 16>(a, shift); }
static inline v8int16 srs(const v8acc48& a, int shift) { return srs_<int16_t, 8>(a, shift); }
static inline v8int32 srs(const v8acc80& a, int shift) { return srs_<int32_t, 8>(a, shift); }
"""
