"""The two Kubernetes API calls discovery makes: list the pods a selector matches, and
watch them from a resource version. Nothing else of the API is needed, so no client library.

In a cluster the API server is ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``,
verified with the service account's CA, and each request carries the account's token, read
from its file at every call: the kubelet rotates a projected token (hourly by default) by
rewriting the file. An explicit ``api_url`` (``kubectl proxy``, a test server) is used as
given, with the token only when the file exists.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from proxy.discovery.pods import Pod
from proxy.discovery.state import DiscoveryError, Gone, WatchEvent
from proxy.policy.discovery import KubernetesSource

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# A watch event is one JSON line; a pod with large annotations stays far below this.
_MAX_LINE = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class PodList:
    pods: list[Pod]
    resource_version: str


class KubeApi:
    """Pods of one namespace by one selector, through an ``httpx.AsyncClient`` it owns."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        namespace: str,
        selector: Mapping[str, str],
        token_file: Path | None = None,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self._path = f"/api/v1/namespaces/{namespace}/pods"
        # matchLabels as the API's equality-based selector (`k=v,k2=v2`).
        self._selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        self._token_file = token_file

    @classmethod
    def connect(
        cls,
        source: KubernetesSource,
        environ: Mapping[str, str] = os.environ,
        account: Path = SERVICE_ACCOUNT,
    ) -> KubeApi:
        """The API as ``source`` names it: its ``api_url``, else the cluster's own."""
        token = account / "token"
        verify: ssl.SSLContext | bool = True
        if source.api_url is not None:
            base = source.api_url.rstrip("/")
        else:
            host = environ.get("KUBERNETES_SERVICE_HOST")
            port = environ.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise DiscoveryError(
                    "not in a cluster (no KUBERNETES_SERVICE_HOST): set "
                    "discovery.kubernetes.api_url"
                )
            base = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
            try:
                verify = ssl.create_default_context(cafile=str(account / "ca.crt"))
            except (OSError, ssl.SSLError) as exc:
                raise DiscoveryError(f"cannot read the cluster's CA: {exc}") from exc
        namespace = source.namespace or _own_namespace(account)
        client = httpx.AsyncClient(base_url=base, verify=verify, timeout=httpx.Timeout(30.0))
        return cls(client, namespace, source.selector.matchLabels, token)

    async def aclose(self) -> None:
        await self._client.aclose()

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "application/json"}
        if self._token_file is not None:
            try:
                headers["authorization"] = "Bearer " + self._token_file.read_text().strip()
            except FileNotFoundError:
                pass  # out of the cluster (kubectl proxy): no token to send
            except OSError as exc:
                raise DiscoveryError(f"cannot read the service account token: {exc}") from exc
        return headers

    async def list_pods(self, timeout_s: float = 30.0) -> PodList:
        try:
            response = await self._client.get(
                self._path,
                params={"labelSelector": self._selector},
                headers=self._headers(),
                timeout=timeout_s,
            )
        except httpx.HTTPError as exc:
            raise DiscoveryError(f"listing pods: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            text = response.text[:200]
            raise DiscoveryError(f"listing pods: HTTP {response.status_code}: {text}")
        try:
            body = orjson.loads(response.content)
            version = str((body.get("metadata") or {}).get("resourceVersion", ""))
            return PodList([Pod.from_api(item) for item in body.get("items") or []], version)
        except (orjson.JSONDecodeError, AttributeError, TypeError) as exc:
            raise DiscoveryError(f"listing pods: not a PodList: {exc}") from exc

    async def watch_pods(self, resource_version: str, timeout_s: int) -> AsyncIterator[WatchEvent]:
        """The events after ``resource_version`` until the server ends the watch (after
        ``timeout_s``). Raises :class:`Gone` when the version is too old."""
        params = {
            "labelSelector": self._selector,
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_s),
        }
        # A watch is quiet for as long as no pod changes, until the server ends it after
        # timeoutSeconds; a connection silent for longer than that is dead (a node or a
        # network path lost without a reset), and is given up.
        timeout = httpx.Timeout(30.0, read=timeout_s + 30.0)
        try:
            async with self._client.stream(
                "GET", self._path, params=params, headers=self._headers(), timeout=timeout
            ) as response:
                if response.status_code == 410:
                    raise Gone("resource version too old")
                if response.status_code != 200:
                    text = (await response.aread())[:200].decode("utf-8", "replace")
                    raise DiscoveryError(f"watching pods: HTTP {response.status_code}: {text}")
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    if len(line) > _MAX_LINE:
                        raise DiscoveryError("watching pods: an event line too long")
                    yield WatchEvent.from_api(_event(line))
        except httpx.HTTPError as exc:
            raise DiscoveryError(f"watching pods: {type(exc).__name__}: {exc}") from exc


def _event(line: str) -> dict[str, Any]:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise DiscoveryError(f"watching pods: not JSON: {exc}") from exc
    if not isinstance(event, dict):
        raise DiscoveryError("watching pods: an event is not an object")
    return event


def _own_namespace(account: Path) -> str:
    try:
        return (account / "namespace").read_text().strip() or "default"
    except OSError:
        return "default"
