"""Keys files, authentication, and how refusals are worded and headed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from proxy.errors import GatewayError
from proxy.gateway.auth import (
    FrontDoor,
    KeyRing,
    KeysError,
    LocalLimiter,
    TenantMetrics,
    hash_key,
    new_key,
    openai_duration,
)


def ring(tmp_path: Path, text: str) -> KeyRing:
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    return KeyRing.load(path)


def door(keys: KeyRing | None) -> FrontDoor:
    return FrontDoor(keys, LocalLimiter(), TenantMetrics(CollectorRegistry()))


def test_keys_are_matched_by_their_hash(tmp_path: Path) -> None:
    key = new_key()
    assert key.startswith("sk-") and len(key) > 40
    keys = ring(
        tmp_path,
        f"tenants:\n  acme: {{requests_per_minute: 5}}\nkeys:\n"
        f"  - {{sha256: {hash_key(key)}, tenant: acme, label: ci}}\n",
    )
    tenant = keys.tenant_for(key)
    assert tenant is not None and tenant.name == "acme"
    assert tenant.limits.requests_per_minute == 5
    assert keys.tenant_for(key + "x") is None
    assert key not in (tmp_path / "keys.yaml").read_text()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("keys:\n  - {sha256: " + "a" * 64 + ", tenant: ghost}\n", "not declared: ghost"),
        ("tenants: {a: {}}\nkeys:\n  - {sha256: abc, tenant: a}\n", "keys.0.sha256"),
        ("tenants: {a: {requests_per_minute: 0}}\n", "tenants.a.requests_per_minute"),
        ("tenants: [\n", "not valid YAML"),
    ],
)
def test_bad_keys_files_name_the_problem(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(KeysError, match=r"keys\.yaml") as caught:
        ring(tmp_path, text)
    assert problem in str(caught.value)


def test_authenticate_open_mode_and_401s(tmp_path: Path) -> None:
    assert door(None).authenticate(None) is None
    key = new_key()
    keys = ring(tmp_path, f"tenants: {{a: {{}}}}\nkeys: [{{sha256: {hash_key(key)}, tenant: a}}]\n")
    gate = door(keys)
    found = gate.authenticate(f"Bearer {key}")
    assert found is not None and found.name == "a"
    for header in (None, "", "Basic abc", "Bearer ", f"Bearer {key}0"):
        with pytest.raises(GatewayError) as refused:
            gate.authenticate(header)
        assert refused.value.status == 401
        assert refused.value.payload()["error"]["code"] == "invalid_api_key"
        assert refused.value.type == "authentication_error"
        assert key not in refused.value.message


async def test_refusal_carries_retry_after_and_quota_headers(tmp_path: Path) -> None:
    key = new_key()
    keys = ring(
        tmp_path,
        "tenants: {a: {requests_per_minute: 1, tokens_per_minute: 50}}\n"
        f"keys: [{{sha256: {hash_key(key)}, tenant: a}}]\n",
    )
    gate = door(keys)
    tenant = gate.authenticate(f"Bearer {key}")
    admitted = await gate.admit(tenant, "m", 10, "r1")
    assert admitted is not None
    assert dict(admitted.headers)[b"x-ratelimit-remaining-tokens"] == b"40"
    with pytest.raises(GatewayError) as refused:
        await gate.admit(tenant, "m", 10, "r2")
    headers = dict(refused.value.headers)
    assert refused.value.status == 429
    assert headers[b"retry-after"] == b"60"
    assert int(headers[b"retry-after-ms"]) > 59000
    assert headers[b"x-ratelimit-limit-requests"] == b"1"
    assert headers[b"x-ratelimit-remaining-requests"] == b"0"
    with pytest.raises(GatewayError, match="Request too large"):
        await door(keys).admit(tenant, "m", 51, "r3")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0123, "13ms"),
        (0.5, "500ms"),
        (1.0, "1s"),
        (1.5, "1.5s"),
        (59.9, "59.9s"),
        (360, "6m0s"),
        (61.2, "1m2s"),
    ],
)
def test_durations_as_openai_writes_them(seconds: float, text: str) -> None:
    assert openai_duration(seconds) == text


def _keys_text(*pairs: tuple[str, str]) -> str:
    lines = "".join(f"  - {{sha256: {hash_key(key)}, tenant: {tenant}}}\n" for key, tenant in pairs)
    return "tenants:\n  acme: {}\n  beta: {}\nkeys:\n" + lines


def test_a_rotated_keys_file_takes_effect_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    old, new = new_key(), new_key()
    path.write_text(_keys_text((old, "acme")))
    metrics = TenantMetrics(CollectorRegistry())
    front = FrontDoor(KeyRing.load(path), LocalLimiter(), metrics, path)
    assert front.reload_keys() is False  # unchanged file: nothing read
    assert front.authenticate(f"Bearer {old}") is not None

    # Rotation: the new key in, the old one revoked.
    path.write_text(_keys_text((new, "beta")))
    _bump_mtime(path)
    assert front.reload_keys() is True
    tenant = front.authenticate(f"Bearer {new}")
    assert tenant is not None and tenant.name == "beta"
    with pytest.raises(GatewayError) as revoked:
        front.authenticate(f"Bearer {old}")
    assert revoked.value.status == 401

    # A half-written file is refused; the keys in force keep serving.
    path.write_text("tenants: [\n")
    _bump_mtime(path)
    assert front.reload_keys() is False
    assert front.authenticate(f"Bearer {new}") is not None
    # A deleted file (a Secret being remounted) changes nothing either.
    path.unlink()
    assert front.reload_keys() is False
    assert front.authenticate(f"Bearer {new}") is not None
    samples = {
        s.labels["result"]: s.value
        for s in metrics.keys_reloads.collect()[0].samples
        if s.name.endswith("_total")
    }
    assert samples == {"ok": 1.0, "refused": 1.0}


def test_open_mode_is_not_closed_by_a_keys_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    front = FrontDoor(None, LocalLimiter(), TenantMetrics(CollectorRegistry()), path)
    path.write_text(_keys_text((new_key(), "acme")))
    assert front.reload_keys() is False
    assert front.authenticate(None) is None


def _bump_mtime(path: Path) -> None:
    # Two writes within the filesystem's timestamp granularity look unchanged.
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
