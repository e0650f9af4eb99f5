"""The classifier decides as the reference tree did: same label, reason and features (all of
them, in order) on every evaluation sample and production-shaped prompt, under four
configurations (see ``classify_data/classify_golden.py``)."""

from __future__ import annotations

import orjson
import pytest

from tests.unit.routing.classify_data.classify_golden import CONFIGS, GOLDEN, corpus, digests


@pytest.fixture(scope="module")
def golden() -> dict[str, object]:
    loaded: dict[str, object] = orjson.loads(GOLDEN.read_bytes())
    return loaded


def test_every_classification_matches_the_reference(golden: dict[str, object]) -> None:
    bodies = corpus()
    assert golden["bodies"] == len(bodies)
    expected = golden["digests"]
    assert isinstance(expected, dict) and set(expected) == set(CONFIGS)
    found = digests(bodies)
    for name in CONFIGS:
        pairs = zip(found[name], expected[name], strict=True)
        differ = [index for index, (new, old) in enumerate(pairs) if new != old]
        assert not differ, f"{name}: {len(differ)} bodies decided otherwise, first {differ[:10]}"
