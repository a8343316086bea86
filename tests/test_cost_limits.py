"""Operators beyond the cost model's 64-bit counts are one clear error, not an OverflowError."""

import pytest
from click.testing import CliRunner

from accelmap.cli import main
from accelmap.cost.model import check_countable
from accelmap.errors import SpecError
from accelmap.workload import conv2d, gemm


def test_limits():
    with pytest.raises(SpecError, match="1e\\+36 MACs is too large"):
        check_countable(gemm("g", m=10**12, n=10**12, k=10**12))
    with pytest.raises(SpecError, match="spans .* elements, too large"):
        check_countable(conv2d("c", c=1, h=10**18, w=3, k=1, r=3, s=3, stride=10**6))
    with pytest.raises(SpecError, match="bits; the cost model handles at most 256"):
        check_countable(gemm("g", m=4, n=4, k=4, bits={"I": 10**6, "W": 8, "O": 32}))
    check_countable(gemm("g", m=10**5, n=10**5, k=10**5))


@pytest.mark.parametrize("cmd", ["evaluate", "map"])
def test_huge_gemm_is_one_line(tmp_path, cmd):
    w = tmp_path / "huge.yaml"
    w.write_text("gemm: {m: 1000000000000, n: 1000000000000, k: 1000000000000}\n")
    m = tmp_path / "m.yaml"
    m.write_text("mapping:\n  - level: DRAM\n    temporal: [[M, 1000000000000], [N, 1000000000000], "
                 "[K, 1000000000000]]\n  - level: GLB\n  - level: RF\n")
    args = (["evaluate", "-w", str(w), "-m", str(m)] if cmd == "evaluate"
            else ["map", str(w), "-a", "eyeriss_like", "--no-cache", "-j", "1", "--out", str(tmp_path / "o")])
    r = CliRunner().invoke(main, args)
    assert "Traceback" not in r.output and not isinstance(r.exception, OverflowError), r.output
    assert "MACs is too large" in r.output


def test_divisors_from_prime_factors():
    import math

    from accelmap.mapping.sampling import divisors, prime_factors

    for n in list(range(1, 2000)) + [720720, 2**40, 999983 * 3]:
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0] if n < 10**6 else True
        assert math.prod(prime_factors(n)) == n and prime_factors(n) == sorted(prime_factors(n))
    assert len(divisors(10**12)) == 169 and divisors(10**12)[-1] == 10**12
