"""The YAML loader every reader uses: limits against alias bombs and deep nesting, duplicate keys."""

import time

import pytest

from accelmap.cli import one_line
from accelmap.errors import SpecError
from accelmap.yaml_io import MAX_BYTES, load_yaml, parse_yaml


def _bomb(levels: int = 9) -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    prev = "a"
    for c in "bcdefghijklmnop"[:levels - 1]:
        text += f"{c}: &{c} [" + ",".join([f"*{prev}"] * 9) + "]\n"
        prev = c
    return text


def test_alias_bomb_fails_fast_with_a_short_message():
    t0 = time.process_time()       # CPU time: a parallel test worker on the other core cannot starve it
    with pytest.raises(SpecError, match="aliases expand this document by more than") as e:
        parse_yaml(_bomb(), "bomb.yaml")
    assert time.process_time() - t0 < 1.0
    assert len(str(e.value)) < 200


def test_a_big_scalar_aliased_many_times_is_a_bomb_too():
    text = 'a: &a "' + "x" * 200_000 + '"\nb: [' + ",".join(["*a"] * 10) + "]\n"
    with pytest.raises(SpecError, match="aliases expand"):
        parse_yaml(text, "f.yaml")


def test_moderate_aliases_are_fine():
    assert parse_yaml("a: &x {m: 1}\nb: *x\nc: [*x, *x]\n", "f.yaml") == {"a": {"m": 1}, "b": {"m": 1},
                                                                           "c": [{"m": 1}, {"m": 1}]}


def test_recursive_alias_is_refused():
    with pytest.raises(SpecError, match="recursive"):
        parse_yaml("a: &a [1, *a]\n", "f.yaml")


def test_too_many_aliases():
    with pytest.raises(SpecError, match="more than 1000 aliases"):
        parse_yaml("a: &a 1\nb: [" + ",".join(["*a"] * 1001) + "]\n", "f.yaml")


def test_deep_nesting_is_one_error_not_a_recursion_error():
    with pytest.raises(SpecError, match="nested more than 100 levels"):
        parse_yaml("[" * 50_000 + "]" * 50_000, "f.yaml")


def test_file_size_limit(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("x: '" + "a" * MAX_BYTES + "'\n")
    with pytest.raises(SpecError, match="too large"):
        load_yaml(p)


def test_duplicate_key_names_both_lines():
    with pytest.raises(SpecError, match=r"line 4, column 3: .*duplicate key 'm' \(first at line 2, again at line 4\)"):
        parse_yaml("gemm:\n  m: 1\n  n: 2\n  m: 3\n", "f.yaml")
    with pytest.raises(SpecError, match="duplicate key 'name'"):
        parse_yaml("name: a\nname: b\n", "f.yaml")


def test_merge_keys_may_override():
    assert parse_yaml("b: &b {m: 1, n: 2}\nc:\n  <<: *b\n  m: 4\n", "f.yaml")["c"] == {"m": 4, "n": 2}


def test_not_utf8(tmp_path):
    p = tmp_path / "f.yaml"
    p.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(SpecError, match="UTF-8"):
        load_yaml(p)


def test_cli_messages_are_one_short_line():
    msg = "f.yaml: m must be a positive integer, got '" + "x" * 100_000 + "'\nsecond line"
    out = one_line(msg)
    assert "\n" not in out and len(out) < 200 and "(100,000 characters)" in out
    long = "f.yaml: unknown keys [" + ", ".join(f"'k{i}'" for i in range(10_000)) + "]; allowed: a, b"
    out = one_line(long)
    assert len(out) <= 420 and out.startswith("f.yaml: unknown keys") and out.endswith("allowed: a, b")


def test_a_peer_file_with_a_repeated_key_reads_as_pyyaml_does_and_says_so(tmp_path):
    """ZigZag's own tpu_like.yaml repeats 'ports'; ZigZag reads it with PyYAML (the later value wins)."""
    from accelmap.yaml_io import load_yaml

    p = tmp_path / "peer.yaml"
    p.write_text("mem:\n  ports: [a]\n  size: 1\n  ports: [b]\n")
    dups: list[str] = []
    assert load_yaml(p, dups) == {"mem": {"ports": ["b"], "size": 1}}
    assert dups == ["duplicate key 'ports' at lines 2 and 4: the later one is used"]
