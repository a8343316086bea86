"""The C++ intrinsic emulation header against the NumPy emulator, call by call with random parameters (the
kernels only exercise synthesized ones)."""

from __future__ import annotations

import ctypes

import numpy as np

from accelmap.vector import intrinsics as it
from accelmap.vector.aie_header import AIE_EMULATION_HEADER
from accelmap.vector.emit_cpp import build_kernel

HARNESS = AIE_EMULATION_HEADER + r"""
extern "C" void t_mac16(const int16_t* xs, const int16_t* zs, const int64_t* a, const int* p, int64_t* out) {
    v64int16 x; for (int i = 0; i < 64; i++) x.v[i] = xs[i];
    v16int16 z; for (int i = 0; i < 16; i++) z.v[i] = zs[i];
    v16acc48 acc; for (int i = 0; i < 16; i++) acc.v[i] = a[i];
    v16acc48 r = mac16(acc, x, p[0], (unsigned)p[1], (unsigned)p[2], (unsigned)p[3], z, p[4], (unsigned)p[5],
                       (unsigned)p[6], p[7]);
    for (int i = 0; i < 16; i++) out[i] = r.v[i];
}
extern "C" void t_mac8(const int16_t* xs, const int16_t* zs, const int64_t* a, const int* p, int64_t* out) {
    v64int16 x; for (int i = 0; i < 64; i++) x.v[i] = xs[i];
    v16int16 z; for (int i = 0; i < 16; i++) z.v[i] = zs[i];
    v8acc48 acc; for (int i = 0; i < 8; i++) acc.v[i] = a[i];
    v8acc48 r = mac8(acc, x, p[0], (unsigned)p[1], p[2], (unsigned)p[3], z, p[4], (unsigned)p[5], p[6]);
    for (int i = 0; i < 8; i++) out[i] = r.v[i];
}
extern "C" void t_lmac8(const int32_t* xs, const int32_t* zs, const int64_t* a, const int* p, int64_t* out) {
    v32int32 x; for (int i = 0; i < 32; i++) x.v[i] = xs[i];
    v8int32 z; for (int i = 0; i < 8; i++) z.v[i] = zs[i];
    v8acc80 acc; for (int i = 0; i < 8; i++) acc.v[i] = a[i];
    v8acc80 r = lmac8(acc, x, p[0], (unsigned)p[1], z, p[2], (unsigned)p[3]);
    for (int i = 0; i < 8; i++) out[i] = r.v[i];
}
extern "C" void t_srs(const int64_t* a, int shift, int16_t* o16, int32_t* o32) {
    v16acc48 acc; for (int i = 0; i < 16; i++) acc.v[i] = a[i];
    v8acc80 acc8; for (int i = 0; i < 8; i++) acc8.v[i] = a[i];
    v16int16 r = srs(acc, shift); for (int i = 0; i < 16; i++) o16[i] = r.v[i];
    v8int32 q = srs(acc8, shift); for (int i = 0; i < 8; i++) o32[i] = q.v[i];
}
"""


def _ptr(a):
    return ctypes.c_void_p(a.ctypes.data)


def test_header_equals_numpy_emulator_call_by_call():
    lib, _ = build_kernel(HARNESS)
    dll = ctypes.CDLL(str(lib))
    rng = np.random.default_rng(11)
    for _ in range(300):
        x = rng.integers(-(1 << 15), 1 << 15, 64).astype(np.int16)
        z = rng.integers(-(1 << 15), 1 << 15, 16).astype(np.int16)
        acc = rng.integers(-(1 << 47), 1 << 47, 16).astype(np.int64)
        sq = sum(int(rng.integers(0, 4)) << (4 * k) for k in range(4))
        p = np.array([2 * int(rng.integers(0, 40)), int(rng.integers(0, 1 << 31)), int(rng.integers(0, 1 << 31)), sq,
                      int(rng.integers(0, 20)), int(rng.integers(0, 1 << 31)), int(rng.integers(0, 1 << 31)),
                      int(rng.integers(-4, 5))], dtype=np.int32)
        out = np.zeros(16, np.int64)
        dll.t_mac16(_ptr(x), _ptr(z), _ptr(acc), _ptr(p), _ptr(out))
        want = it.mac16(acc[None], x[None], *[int(v) for v in p[:4]], z[None], *[int(v) for v in p[4:]])
        assert np.array_equal(out, want[0])
        p8 = np.array([p[0], p[1], 2 * int(rng.integers(0, 12)), sq, p[4], p[5], int(rng.integers(-4, 5))], np.int32)
        out8 = np.zeros(8, np.int64)
        dll.t_mac8(_ptr(x), _ptr(z), _ptr(acc), _ptr(p8), _ptr(out8))
        want8 = it.mac8(acc[None, :8], x[None], *[int(v) for v in p8[:4]], z[None], *[int(v) for v in p8[4:]])
        assert np.array_equal(out8, want8[0])
        xi = rng.integers(-(1 << 29), 1 << 29, 32).astype(np.int32)
        zi = rng.integers(-(1 << 29), 1 << 29, 8).astype(np.int32)
        pl = np.array([int(rng.integers(0, 40)), int(rng.integers(0, 1 << 31)), int(rng.integers(0, 12)),
                       int(rng.integers(0, 1 << 31))], np.int32)
        outl = np.zeros(8, np.int64)
        dll.t_lmac8(_ptr(xi), _ptr(zi), _ptr(acc), _ptr(pl), _ptr(outl))
        wantl = it.lmac8(acc[None, :8], xi[None], int(pl[0]), int(pl[1]), zi[None], int(pl[2]), int(pl[3]))
        assert np.array_equal(outl, wantl[0])
        shift = int(rng.integers(0, 20))
        o16, o32 = np.zeros(16, np.int16), np.zeros(8, np.int32)
        dll.t_srs(_ptr(acc), ctypes.c_int(shift), _ptr(o16), _ptr(o32))
        assert np.array_equal(o16, it.srs(acc, shift, 16)) and np.array_equal(o32, it.srs(acc[:8], shift, 32))
