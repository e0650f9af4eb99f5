"""The policy loader under arbitrary input: any text, any mapping, a good policy with any
field replaced, any plugin parameters. Each one either loads or is refused with the
loader's own error (``PolicyError`` from the parse, a ``ValueError`` naming the problem
from the checks a reload runs before applying), never another exception: a reload
(``PUT /admin/policy``, a file edit) with such a document must be refused, not crash."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.gateway.runtime import Runtime
from proxy.policy import Policy, PolicyError, parse_policy
from proxy.routing.scheduler.registry import FILTERS, PICKERS, SCORERS

GOOD: dict[str, Any] = {
    "backends": [
        {"name": "plain-0", "url": "http://127.0.0.1:9000", "model": "llama", "pool": "plain"},
        {
            "name": "ngram-0",
            "url": "http://127.0.0.1:9001",
            "model": "llama",
            "pool": "ngram",
            "speculation": {"method": "ngram", "k": 4},
        },
    ],
    "pools": {"ngram": {"break_even": {"mode": "learned", "concurrency": 40}}},
    "routing": {
        "scorers": [{"type": "load", "weight": 1.0}],
        "picker": {"type": "max_score"},
    },
}

# Any code point, lone surrogates (rare among all code points) drawn on purpose: YAML reads
# one from a "\ud800" escape, and it is no UTF-8.
any_text = st.lists(
    st.one_of(
        st.characters(codec=None), st.characters(codec=None), st.integers(0xD800, 0xDFFF).map(chr)
    ),
    max_size=20,
).map("".join)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()  # NaN and infinities included
    | any_text
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(any_text | st.integers(), inner, max_size=4)
    ),
    max_leaves=16,
)
# Plugin types: the registered ones and made-up names (never "module:attr": that imports).
plugin_types = st.sampled_from(sorted({*FILTERS, *SCORERS, *PICKERS})) | st.text(
    st.characters(exclude_characters=":"), max_size=12
)
params = st.dictionaries(st.text(max_size=24) | st.sampled_from(_KNOWN := [
    "weight", "plain_score", "prefill_tokens_full", "k", "floor", "window", "min_share",
    "chunk", "chunks", "max_age_s", "prefix_cache", "threshold", "seed", "slo", "pools",
]), values, max_size=4)  # fmt: skip


def _load(text: str | bytes) -> Policy | None:
    """The loader's verdict: the policy, or ``None`` when it refused it in its own words."""
    problems: list[str] = []
    try:
        policy = parse_policy(text, "fuzz")
    except PolicyError as exc:
        problems = exc.problems
    else:
        try:
            Runtime.check_policy(policy)
        except ValueError as exc:  # PluginError, PolicyError: what a reload reports as refused
            problems = [str(exc)]
        else:
            return policy
    # Refused: with a message, one line per problem, that the admin API can show as text.
    assert problems and all(isinstance(p, str) and p for p in problems)
    assert "\n".join(problems).encode("utf-8")
    return None


@st.composite
def edited(draw: st.DrawFn) -> dict[str, Any]:
    """The good policy with one field somewhere replaced (or added) by anything."""
    document: Any = yaml.safe_load(yaml.safe_dump(GOOD))
    node = document
    for _ in range(draw(st.integers(0, 4))):
        if isinstance(node, dict) and node:
            child = node[draw(st.sampled_from(sorted(node, key=str)))]
        elif isinstance(node, list) and node:
            child = draw(st.sampled_from(node))
        else:
            break
        if not isinstance(child, dict | list):
            break
        node = child
    if isinstance(node, dict):
        key = draw(st.sampled_from(sorted(node, key=str)) | any_text)
        node[key] = draw(values)
    elif isinstance(node, list):
        node.append(draw(values))
    return document  # type: ignore[no-any-return]


SETTINGS = settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@SETTINGS
@given(text=st.text(st.characters(codec=None), max_size=200) | st.binary(max_size=200))
def test_any_text_loads_or_is_refused_in_the_loaders_words(text: str | bytes) -> None:
    _load(text)


@SETTINGS
@given(document=st.dictionaries(any_text, values, max_size=6) | values)
def test_any_document_loads_or_is_refused(document: Any) -> None:
    _load(yaml.safe_dump(document, allow_unicode=False))


@SETTINGS
@given(document=edited())
def test_a_good_policy_with_any_field_replaced_loads_or_is_refused(document: Any) -> None:
    _load(yaml.safe_dump(document))


@SETTINGS
@given(
    section=st.sampled_from(["filters", "scorers", "picker"]),
    kind=plugin_types,
    given_params=params,
)
def test_any_plugin_and_parameters_build_or_are_refused(
    section: str, kind: str, given_params: dict[str, Any]
) -> None:
    document: Any = yaml.safe_load(yaml.safe_dump(GOOD))
    spec = {"type": kind, "params": given_params}
    document["routing"][section] = spec if section == "picker" else [spec]
    _load(yaml.safe_dump(document))


@SETTINGS
@given(
    where=st.sampled_from(["name", "model", "pool", "pools", "slo.models", "latency.pools"]),
    name=any_text,
)
def test_any_name_loads_or_is_refused(where: str, name: str) -> None:
    """The names the policy's checks cross-reference (and quote in their messages)."""
    document: Any = yaml.safe_load(yaml.safe_dump(GOOD))
    if where in ("name", "model", "pool"):
        document["backends"][0][where] = name
    else:
        section, _, key = where.partition(".")
        holder = document.setdefault(section, {}) if key else document
        holder.setdefault(key or section, {})[name] = {}
    _load(yaml.safe_dump(document))


def test_the_good_policy_loads_and_a_lone_surrogate_is_refused() -> None:
    """The loader accepts what it should (the properties above could pass by refusing
    everything), and refuses a string YAML reads from a ``\\ud800`` escape (found by the
    gateway's OpenAPI fuzzing: it failed validation with a UnicodeEncodeError, a 500)."""
    assert _load(yaml.safe_dump(GOOD)) is not None
    bad = yaml.safe_dump(GOOD).replace("model: llama", 'model: "\\ud800"', 1)
    assert _load(bad) is None
