"""Settings and helpers of the public face: admin exposure, trusted proxies, backend keys,
the model field of an upload."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from proxy.cli import main
from proxy.gateway.clientaddr import client_host, trusted_networks
from proxy.gateway.formfield import FieldScanner, form_boundary
from proxy.policy import parse_policy
from proxy.policy.credentials import resolve_credentials
from proxy.settings import Settings


def test_a_public_bind_needs_an_admin_token() -> None:
    with pytest.raises(ValidationError, match=r"refusing to listen on 0\.0\.0\.0"):
        Settings(host="0.0.0.0")
    assert Settings(host="0.0.0.0", admin_token="t").host == "0.0.0.0"
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.5"):
        assert Settings(host=host).host == host


def test_cli_says_why_it_will_not_start(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "SPECROUTE_ADMIN_TOKEN" in capsys.readouterr().err


def test_comma_separated_lists_from_the_environment() -> None:
    settings = Settings.from_env(
        environ={
            "SPECROUTE_CORS_ALLOW_ORIGINS": "https://a.example, https://b.example",
            "SPECROUTE_TRUSTED_PROXIES": "10.0.0.0/8,127.0.0.1",
        }
    )
    assert settings.cors_allow_origins == ["https://a.example", "https://b.example"]
    assert settings.trusted_proxies == ["10.0.0.0/8", "127.0.0.1"]
    with pytest.raises(ValidationError):
        Settings(trusted_proxies=["not-an-address"])


def scope(peer: str, forwarded: str | None = None) -> dict[str, object]:
    headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded else []
    return {"client": (peer, 1234), "headers": headers}


def test_forwarded_for_is_believed_only_from_trusted_proxies() -> None:
    trusted = trusted_networks(["127.0.0.1", "10.0.0.0/8"])
    # Not a proxy: its own address, whatever it claims.
    assert client_host(scope("203.0.113.9", "127.0.0.1"), trusted) == "203.0.113.9"
    # A trusted proxy: the rightmost address that is not a proxy.
    assert client_host(scope("127.0.0.1", "198.51.100.7, 10.1.2.3"), trusted) == "198.51.100.7"
    # A same-host proxy that names no one: unknown, so not loopback.
    assert client_host(scope("127.0.0.1"), trusted) is None
    # Without trusted proxies loopback is loopback and the header is ignored.
    assert client_host(scope("127.0.0.1", "203.0.113.9"), []) == "127.0.0.1"


def policy_with(**backend: object) -> str:
    entry = {"name": "b", "url": "http://x", "model": "m", "pool": "p", **backend}
    import yaml

    return yaml.safe_dump({"backends": [entry]})


def test_backend_keys_come_from_env_or_file_and_never_show(tmp_path: Path) -> None:
    policy = parse_policy(policy_with(api_key_env="B_KEY", headers={"x-team": "a"}))
    auth = resolve_credentials(policy, {"B_KEY": "s3cret"})["b"]
    assert dict(auth.headers) == {"x-team": "a", "authorization": "Bearer s3cret"}
    assert "s3cret" not in repr(auth)
    with pytest.raises(ValueError, match="B_KEY is not set"):
        resolve_credentials(policy, {})
    (tmp_path / "k").write_text("from-file\n")
    from_file = parse_policy(policy_with(api_key_file=str(tmp_path / "k")))
    assert (
        dict(resolve_credentials(from_file, {})["b"].headers)["authorization"] == "Bearer from-file"
    )
    for bad in (
        {"api_key_env": "A", "api_key_file": "f"},
        {"headers": {"Authorization": "Bearer x"}},
        {"headers": {"bad header": "x"}},
    ):
        with pytest.raises(ValueError, match=r"backends\.0"):
            parse_policy(policy_with(**bad))


def test_model_field_found_in_any_chunking() -> None:
    request = httpx.Request(
        "POST",
        "http://x",
        data={"model": "whisper-1", "language": "en"},
        files={"file": ("a.wav", b"\x00" * 3000, "audio/wav")},
    )
    body = request.read()
    boundary = form_boundary(request.headers["content-type"])
    assert boundary is not None
    for size in (1, 13, len(body)):
        scanner = FieldScanner(boundary, "model")
        found = None
        for i in range(0, len(body), size):
            found = scanner.feed(body[i : i + size]) or found
        assert found == "whisper-1"
    assert form_boundary("application/json") is None
