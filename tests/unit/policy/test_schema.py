from pathlib import Path

import pytest

from proxy.policy import PolicyError, load_policy, parse_policy

GOOD = """
backends:
  - name: plain-0
    url: http://127.0.0.1:9000/
    model: llama
    pool: plain
  - name: ngram-0
    url: http://127.0.0.1:9001
    model: llama
    pool: ngram
    speculation: {method: ngram, k: 4}
pools:
  ngram:
    break_even: {mode: learned, concurrency: 40}
"""


def test_parses_and_normalises() -> None:
    policy = parse_policy(GOOD, "good.yaml")
    assert policy.backends[0].url == "http://127.0.0.1:9000"
    assert policy.pool_names() == ["ngram", "plain"]
    assert policy.pool_spec("ngram").break_even.mode == "learned"
    assert policy.pool_spec("plain").break_even.mode == "static"
    assert policy.models() == ["llama"]


def test_errors_name_file_path_and_reason() -> None:
    text = GOOD.replace("k: 4", "k: -1").replace("pool: plain", "pool: plain\n    colour: red")
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "bad.yaml")
    message = str(info.value)
    assert message.startswith("bad.yaml: invalid policy")
    assert "backends.1.speculation.k" in message
    assert "backends.0.colour" in message


def test_duplicate_names_and_mixed_pools_refused() -> None:
    text = GOOD.replace("name: ngram-0", "name: plain-0")
    with pytest.raises(PolicyError, match="repeated: plain-0"):
        parse_policy(text)
    text = GOOD.replace("pool: ngram", "pool: plain")
    with pytest.raises(PolicyError, match="mixed pools: plain"):
        parse_policy(text)


def test_pools_section_must_name_real_pools() -> None:
    with pytest.raises(PolicyError, match="without backends: ghost"):
        parse_policy(GOOD + "  ghost: {}\n")


@pytest.mark.parametrize("text", ["", "[1, 2]", "backends: [", "backends: []"])
def test_not_a_policy(text: str) -> None:
    with pytest.raises(PolicyError):
        parse_policy(text)


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "nope.yaml")


def test_shipped_policies_are_valid() -> None:
    root = Path(__file__).resolve().parents[3] / "policies"
    files = sorted(root.glob("*.yaml"))
    assert files, "policies/ must ship at least default.yaml"
    for path in files:
        load_policy(path)
