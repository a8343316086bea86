"""The AIE-like intrinsic emulator against direct scalar formulas, the public examples, and its select synthesis."""

from __future__ import annotations

import numpy as np
import pytest

from accelmap.vector import intrinsics as it
from accelmap.vector.select import synth_x, synth_z


def _nib(w, i):
    return (w >> (4 * i)) & 0xF


def _direct_mac16_x(l, c, xstart, xo, xhi, sq):
    """Lane l, column c of mac16: the pair rule written out for one lane (UG1079 wording)."""
    p, h = divmod(l, 2)
    word = xo if p < 4 else xhi
    oe, oo = _nib(word, 2 * (p % 4)), _nib(word, 2 * (p % 4) + 1)
    even, odd = xstart + 2 * oe, xstart + 2 * (oe + oo + 1)
    four = [even, even + 1, odd, odd + 1]
    return four[_nib(sq, 2 * h + c)]


def test_public_examples():
    # UG1079: xoffsets 0x24 selects 16-bit indices 8, 9 (even lane) and 14, 15 (odd lane)
    idx = it.x_index_mac16(0, 0x24, 0, 0x3210)
    assert idx[0].tolist() == [8, 9] and idx[1].tolist() == [14, 15]
    # 0x00 selects 0, 1 and 2, 3
    idx = it.x_index_mac16(0, 0, 0, 0x3210)
    assert idx[0].tolist() == [0, 1] and idx[1].tolist() == [2, 3]
    # xsquare 0x2103 puts 3, 0 in the even row and 1, 2 in the odd row
    idx = it.x_index_mac16(0, 0, 0, 0x2103)
    assert idx[0].tolist() == [3, 0] and idx[1].tolist() == [1, 2]


def test_mac16_against_direct_formula():
    rng = np.random.default_rng(1)
    x = rng.integers(-(1 << 15), 1 << 15, size=(3, 64)).astype(np.int16)
    z = rng.integers(-(1 << 15), 1 << 15, size=(3, 16)).astype(np.int16)
    acc0 = rng.integers(-(1 << 47), 1 << 47, size=(3, 16))
    squares = [s for s in range(1 << 16) if all(_nib(s, k) < 4 for k in range(4))]
    assert len(squares) == 256
    for trial, sq in enumerate(squares):
        xo, xhi = (int(v) for v in rng.integers(0, 1 << 32, size=2))
        xstart = 2 * int(rng.integers(0, 32))
        zstart, zo, zhi, zstep = int(rng.integers(0, 16)), *(int(v) for v in rng.integers(0, 1 << 32, 2)), \
            int(rng.integers(-3, 4))
        got = it.mac16(acc0, x, xstart, xo, xhi, sq, z, zstart, zo, zhi, zstep)
        for b in range(3):
            for l in range(16):
                zoff = _nib(zo, l) if l < 8 else _nib(zhi, l - 8)
                s = int(acc0[b, l])
                for c in range(2):
                    xi = _direct_mac16_x(l, c, xstart, xo, xhi, sq) % 64
                    s += int(x[b, xi]) * int(z[b, (zstart + zoff + c * zstep) % 16])
                want = (s + (1 << 47)) % (1 << 48) - (1 << 47)     # 48-bit accumulator
                assert got[b, l] == want, (trial, b, l)


def test_mac8_columns_repeat_with_step():
    rng = np.random.default_rng(2)
    x = rng.integers(-(1 << 15), 1 << 15, size=(1, 64)).astype(np.int16)
    z = rng.integers(-(1 << 15), 1 << 15, size=(1, 16)).astype(np.int16)
    for _ in range(200):
        xo = int(rng.integers(0, 1 << 32))
        xstart, xstep = 2 * int(rng.integers(0, 32)), 2 * int(rng.integers(0, 16))
        sq = sum(int(rng.integers(0, 4)) << (4 * k) for k in range(4))
        zstart, zo, zstep = int(rng.integers(0, 16)), int(rng.integers(0, 1 << 32)), int(rng.integers(0, 4))
        got = it.mac8(None, x, xstart, xo, xstep, sq, z, zstart, zo, zstep)
        for l in range(8):
            s = 0
            for col in range(4):
                q, c = divmod(col, 2)
                xi = (_direct_mac16_x(l, c, xstart, xo, 0, sq) + q * xstep) % 64
                s += int(x[0, xi]) * int(z[0, (zstart + _nib(zo, l) + col * zstep) % 16])
            assert got[0, l] == (s + (1 << 47)) % (1 << 48) - (1 << 47)


def test_lmac8_full_permutation_and_range_guard():
    rng = np.random.default_rng(3)
    x = rng.integers(-(1 << 30), 1 << 30, size=(2, 32)).astype(np.int32)
    z = rng.integers(-(1 << 30), 1 << 30, size=(2, 8)).astype(np.int32)
    for _ in range(100):
        xstart, xo = int(rng.integers(0, 32)), int(rng.integers(0, 1 << 32))
        zstart, zo = int(rng.integers(0, 8)), int(rng.integers(0, 1 << 32))
        got = it.lmac8(None, x, xstart, xo, z, zstart, zo)
        for b in range(2):
            for l in range(8):
                assert got[b, l] == int(x[b, (xstart + _nib(xo, l)) % 32]) * int(z[b, (zstart + _nib(zo, l)) % 8])
    big = np.full((1, 32), -(1 << 31), dtype=np.int32)
    with pytest.raises(it.IntrinsicError, match="int64 emulation range"):
        it.lmac8(None, big, 0, 0, big[:, :8], 0, 0)


def test_parameter_rules():
    x, z = np.zeros((1, 32), np.int16), np.zeros((1, 16), np.int16)
    with pytest.raises(it.IntrinsicError, match="even"):
        it.mac16(None, x, 1, 0, 0, 0x3210, z, 0, 0, 0, 1)
    with pytest.raises(it.IntrinsicError, match="xstep"):
        it.mac8(None, x, 0, 0, 3, 0x3210, z, 0, 0, 1)
    with pytest.raises(it.IntrinsicError, match="X buffer of 16"):
        it.mac16(None, z, 0, 0, 0, 0x3210, z, 0, 0, 0, 1)
    with pytest.raises(it.IntrinsicError, match="0..3"):
        it.x_index_mac16(0, 0, 0, 0x3214)


def test_srs_truncates_and_saturates():
    acc = np.array([[-(1 << 40), -3, -1, 0, 5, 70000, 1 << 40]], dtype=np.int64)
    assert it.srs(acc, 0, 16).tolist() == [[-32768, -3, -1, 0, 5, 32767, 32767]]
    assert it.srs(acc, 1, 32).tolist() == [[-(1 << 31), -2, -1, 0, 2, 35000, (1 << 31) - 1]]


def test_aligned_loads_and_grouped_registers():
    mem = np.arange(256, dtype=np.int16)
    assert it.aligned_load(mem, np.array([8, 16]), 32)[1, 0] == 16
    with pytest.raises(it.IntrinsicError, match="unaligned"):
        it.aligned_load(mem, np.array([4]), 8)
    with pytest.raises(it.IntrinsicError, match="legal register width"):
        it.aligned_load(mem, np.array([0]), 24)
    assert [it.register_bits_for(b) for b in (16, 128, 129, 512, 700, 1024, 1025)] == [128, 128, 256, 512, 1024,
                                                                                          1024, 0]


def _brute_force_expressible(sig):
    """Independent search: every even xstart, every square, and per lane pair every (o_even, o_odd) nibble pair."""
    oe, oo = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    oe, oo = oe.ravel(), oo.ravel()
    for sq in range(1 << 16):
        nibs = [_nib(sq, k) for k in range(4)]
        if any(n > 3 for n in nibs):
            continue
        for xstart in range(0, 64, 2):
            even, odd = xstart + 2 * oe, xstart + 2 * (oe + oo + 1)
            four = np.stack([even, even + 1, odd, odd + 1], axis=1)[:, nibs]      # (256, 4)
            want = sig.reshape(8, 4)
            if all(np.any(np.all(four == want[p], axis=1)) for p in range(8)):
                return True
    return False


@pytest.mark.parametrize("stride,dilation,shift,expressible", [
    (1, 1, 0, True), (1, 1, 1, True), (1, 2, 0, True), (2, 1, 0, True), (2, 1, 2, True), (2, 1, 3, False),
    (2, 2, 0, False), (3, 1, 0, False), (1, 3, 0, False)])
def test_sliding_window_selection_is_expressible_exactly_when_brute_force_says_so(stride, dilation, shift,
                                                                                  expressible):
    sig = np.array([[shift + stride * i + dilation * j for j in range(2)] for i in range(16)])
    params = synth_x(it.MAC16, tuple(map(tuple, sig.tolist())))
    assert (params is not None) == expressible
    if params is not None:
        assert np.array_equal(it.x_index_mac16(*params), sig)
    if stride * 15 + dilation + shift < 64:
        assert _brute_force_expressible(sig) == expressible


def test_synthesis_round_trips_random_parameters():
    rng = np.random.default_rng(4)
    for _ in range(100):
        p = (2 * int(rng.integers(0, 8)), int(rng.integers(0, 1 << 32)), int(rng.integers(0, 1 << 32)),
             sum(int(rng.integers(0, 4)) << (4 * k) for k in range(4)))
        sig = it.x_index_mac16(*p)
        got = synth_x(it.MAC16, tuple(map(tuple, sig.tolist())))
        assert got is not None and np.array_equal(it.x_index_mac16(*got), sig)
    # Z: broadcast of two adjacent filter taps (Vyasa Table IV), and a per-lane selection wider than 16 is refused
    assert synth_z(it.MAC16, tuple((2, 3) for _ in range(16))) == (2, 0, 0, 1)
    assert synth_z(it.MAC16, tuple((i, i + 1) for i in range(16))) is None
