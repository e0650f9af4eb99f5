"""Starting the picker's two gRPC servers: ext_proc and health, on separate ports.

The reference picker listens on 9002 (ext_proc) and 9003 (health) and, by default, serves
ext_proc over TLS with a certificate it makes itself at start: Envoy's cluster then uses TLS
without verifying it (the traffic is encrypted; who the picker is, is the cluster's address).
Plaintext is for a picker beside Envoy on the same host or in tests; a cert/key pair is for
a deployment that verifies the picker. Health stays plaintext, as kubelet gRPC probes need.

The ext_proc port also serves Envoy's gRPC access log service (:mod:`proxy.epp.accesslog`),
through which an Envoy that keeps response bodies out of the picker reports each response's
end; the same cluster, so no other port to open or secure.

Port 0 binds an ephemeral port; the bound ports are on the returned :class:`PickerServers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from envoy.service.accesslog.v3 import als_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2_grpc

from proxy.epp.accesslog import AccessLogReceiver
from proxy.epp.extproc import ExternalProcessor
from proxy.epp.health import PickerHealth
from proxy.epp.ledger import EndLedger
from proxy.epp.seams import Brain

# Requests of up to a few MB (long RAG prompts) arrive in Envoy's chunks, but a replaced
# body goes back in 62,000-byte messages; 16 MiB leaves room for any single message.
_MAX_MESSAGE = 16 * 1024 * 1024
_OPTIONS = (
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
    ("grpc.max_send_message_length", _MAX_MESSAGE),
)


@dataclass(frozen=True, slots=True)
class Tls:
    """TLS for the ext_proc port: a cert/key PEM pair, or ``None`` files for a self-signed
    certificate made at start."""

    cert_file: Path | None = None
    key_file: Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        if self.cert_file is not None and self.key_file is not None:
            pair = (self.key_file.read_bytes(), self.cert_file.read_bytes())
        else:
            pair = self_signed()
        return grpc.ssl_server_credentials([pair])


def self_signed(days: int = 365) -> tuple[bytes, bytes]:
    """A fresh P-256 key and a certificate for ``localhost``/127.0.0.1 signed by itself, as
    (key PEM, certificate PEM). Made in memory at each start: nothing to rotate or leak."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "specroute-epp")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class PickerServers:
    """The running servers and their bound ports."""

    extproc: grpc.aio.Server
    health: grpc.aio.Server
    extproc_port: int
    health_port: int
    checker: PickerHealth
    ledger: EndLedger
    sweeper: asyncio.Task[None]

    async def stop(self, grace: float | None = 5.0) -> None:
        """Report NOT_SERVING, then let streams in flight finish for ``grace`` seconds (their
        exchanges close with ``complete=False`` if cut), then stop both servers; exchanges
        still waiting for Envoy's access log are released as incomplete."""
        await self.checker.stop()
        await self.extproc.stop(grace)
        await self.health.stop(grace)
        self.sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.sweeper
        self.ledger.close_all()


async def _sweep(ledger: EndLedger, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        ledger.sweep()


async def start_picker(
    brain: Brain,
    *,
    host: str = "0.0.0.0",
    port: int = 9002,
    health_port: int = 9003,
    tls: Tls | None = None,
    ready_interval: float = 1.0,
    ledger: EndLedger | None = None,
) -> PickerServers:
    """Start ext_proc and the access log service on ``port`` (TLS when ``tls`` is given)
    and health on ``health_port``."""
    ledger = ledger if ledger is not None else EndLedger()
    extproc = grpc.aio.server(options=_OPTIONS)
    pb_grpc.add_ExternalProcessorServicer_to_server(ExternalProcessor(brain, ledger), extproc)
    als_pb2_grpc.add_AccessLogServiceServicer_to_server(AccessLogReceiver(ledger), extproc)
    address = f"{host}:{port}"
    if tls is None:
        bound = extproc.add_insecure_port(address)
    else:
        bound = extproc.add_secure_port(address, tls.credentials())

    checker = PickerHealth(brain, ready_interval)
    health = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(checker.servicer, health)
    health_bound = health.add_insecure_port(f"{host}:{health_port}")

    await checker.start()
    await health.start()
    await extproc.start()
    sweeper = asyncio.get_running_loop().create_task(
        _sweep(ledger, min(60.0, ledger.max_wait_s / 4)), name="epp-ledger-sweep"
    )
    return PickerServers(extproc, health, int(bound), int(health_bound), checker, ledger, sweeper)
