"""The ``specroute`` command: serve, epp, sim, policy validate, check, bench, plan."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from proxy.logs import configure_logging
from proxy.policy import Policy, PolicyError, load_policy
from proxy.settings import Settings

SETTINGS_ENV = "SPECROUTE_SETTINGS_JSON"


def app_from_env() -> object:
    """uvicorn factory for ``--workers N``: each worker rebuilds the same settings."""
    from proxy.gateway.app import create_app

    settings = Settings.model_validate_json(os.environ[SETTINGS_ENV])
    # uvicorn starts each worker as a fresh interpreter (spawn): the serving process's logging
    # set-up does not reach it, and without this a worker's lines (the access log among them)
    # are dropped below WARNING and unformatted above it.
    configure_logging(settings.log_level, settings.log_format)
    return create_app(settings)


def _startup_problem(settings: Settings) -> str | None:
    """What would stop the gateway starting, said before anything starts."""
    from proxy.gateway.auth import KeyRing, KeysError
    from proxy.policy.credentials import resolve_credentials

    if settings.keys_file is not None:
        try:
            KeyRing.load(settings.keys_file)
        except KeysError as exc:
            return str(exc)
    if settings.policy_path is not None:
        try:
            policy = load_policy(settings.policy_path)
            resolve_credentials(policy)
        except PolicyError as exc:
            return str(exc)
        except ValueError as exc:
            return f"{settings.policy_path}: {exc}"
    return None


def _keys(args: argparse.Namespace) -> int:
    from proxy.gateway.auth import hash_key, new_key

    key = args.key or new_key()
    if args.key is None:
        print(f"key:    {key}")
    print(f"sha256: {hash_key(key)}")
    return 0


def _settings(command: str, args: argparse.Namespace, extra: dict[str, object]) -> Settings | None:
    """The process settings from the command line over ``SPECROUTE_*``; ``None`` (said on
    stderr) when they do not hold, or name files the process could not start with."""
    try:
        settings = Settings.from_env(
            {
                "host": args.host,
                "policy_path": args.config,
                "redis_url": args.redis_url,
                "admin_token": args.admin_token,
                "log_level": args.log_level,
                "log_format": args.log_format,
                "keys_file": args.keys_file,
                **extra,
            }
        )
    except ValidationError as exc:
        for error in exc.errors():
            where = "".join(f"{p}: " for p in error["loc"])
            print(f"specroute {command}: {where}{error['msg']}", file=sys.stderr)
        return None
    problem = _startup_problem(settings)
    if problem is not None:
        print(problem, file=sys.stderr)
        return None
    return settings


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from proxy.gateway.banner import banner

    settings = _settings(
        "serve",
        args,
        {
            "port": args.port,
            "workers": args.workers,
            "upstream_client": args.upstream,
            "sim_logs": args.sim_logs or None,
            "access_log": args.access_log or None,
            "traffic_log_path": args.traffic_log,
        },
    )
    if settings is None:
        return 2
    if settings.workers > 1:
        if settings.policy_path is None:
            print(
                "--workers > 1 needs --config: each worker would start its own embedded fleet",
                file=sys.stderr,
            )
            return 2
        if not settings.redis_url and not load_policy(settings.policy_path).store.redis_url:
            print(
                "--workers > 1 needs a shared store, or each worker would count load alone: "
                "set SPECROUTE_REDIS_URL / --redis-url (or store.redis_url in the policy)",
                file=sys.stderr,
            )
            return 2
    configure_logging(settings.log_level, settings.log_format)
    common = _uvicorn_options(settings)
    if settings.workers > 1:
        os.environ[SETTINGS_ENV] = settings.model_dump_json()
        # Printed once here rather than by each worker.
        path = settings.policy_path
        assert path is not None  # checked above: several workers need --config
        print(banner(settings, load_policy(path), str(path)))
        uvicorn.run("proxy.cli:app_from_env", factory=True, workers=settings.workers, **common)
    else:
        from proxy.embedded import start_embedded_fleet
        from proxy.gateway.app import create_app
        from proxy.gateway.banner import announce

        app = create_app(settings, startup_hooks=[announce], local_fleet=start_embedded_fleet)
        uvicorn.run(app, **common)
    return 0


def _uvicorn_options(settings: Settings) -> dict[str, Any]:
    from proxy.gateway.server_limits import uvicorn_limits

    return {
        "host": settings.host,
        "port": settings.port,
        "loop": "uvloop",
        **uvicorn_limits(settings),
        "log_level": settings.log_level,
        # uvicorn's lines go through the process's logging (one format, text or JSON).
        "log_config": None,
        "access_log": False,
        # X-Forwarded-For is judged by the gateway itself, against trusted_proxies only
        # (uvicorn would believe it from 127.0.0.1 by default).
        "proxy_headers": False,
        "timeout_graceful_shutdown": settings.shutdown_drain_s,
    }


def _epp(args: argparse.Namespace) -> int:
    """``specroute epp``: the Endpoint Picker for Envoy (ext_proc), with the admin API,
    /metrics and /ui on the HTTP port (9090 unless set)."""
    import uvicorn

    from proxy.embedded import start_embedded_fleet
    from proxy.epp.app import create_picker_app

    port = args.http_port
    if port is None and not os.environ.get("SPECROUTE_PORT"):
        port = 9090
    settings = _settings(
        "epp",
        args,
        {
            "port": port,
            "grpc_port": args.grpc_port,
            "health_port": args.health_port,
            "grpc_tls": args.grpc_tls,
            "grpc_cert_path": args.grpc_cert,
            "grpc_key_path": args.grpc_key,
            "fallback_endpoints": args.fallback_endpoints,
        },
    )
    if settings is None:
        return 2
    configure_logging(settings.log_level, settings.log_format)
    app = create_picker_app(settings, local_fleet=start_embedded_fleet)
    uvicorn.run(app, **_uvicorn_options(settings))
    return 0


def _load_valid(path: Path) -> Policy | None:
    """The policy at ``path`` if its schema and plugins hold; else why not, on stderr."""
    from proxy.gateway.runtime import Runtime

    try:
        policy = load_policy(path)
        # The limits this process would hold the policy to (SPECROUTE_PLUGIN_MODULES,
        # SPECROUTE_BACKEND_URL_ALLOW), as the gateway started here would.
        limits = Settings.from_env()
        Runtime.check_policy(policy, limits.plugin_modules, limits.backend_url_allow)
    except PolicyError as exc:
        print(exc, file=sys.stderr)
        return None
    except ValueError as exc:
        print(f"{path}: invalid policy:\n  - {exc}", file=sys.stderr)
        return None
    return policy


def _validate(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        policy = _load_valid(path)
        if policy is None:
            status = 1
            continue
        pools = ", ".join(policy.pool_names())
        print(f"{path}: ok ({len(policy.backends)} backends, pools: {pools})")
    return status


def _check(args: argparse.Namespace) -> int:
    from proxy.check import ModelResolver, check_deployment

    resolver = ModelResolver(args.models)
    status = 0
    for path in args.files:
        policy = _load_valid(path)
        if policy is None:
            status = 1
            continue
        report = check_deployment(policy, path, resolver)
        for finding in report.findings:
            print(f"{path}: {finding}", file=sys.stderr if finding.level == "error" else sys.stdout)
        verdict = "ok" if report.ok else "refused"
        print(f"{path}: {verdict} ({report.engines_checked} engine launch configs checked)")
        status = status if report.ok else 1
    return status


def _from_checkout(module_name: str, argv: list[str]) -> int:
    """Run ``module_name.main(argv)`` from the repository's ``loadtests/`` (not in the
    wheel): found at run time, from the import path or the current directory."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        if not (Path.cwd() / "loadtests" / "cli.py").is_file():
            print(
                "specroute bench and specroute plan run code in the repository's loadtests/ "
                "folder, which this installation does not include: run them from a checkout "
                "of the repository (its root as the current directory)",
                file=sys.stderr,
            )
            return 2
        sys.path.insert(0, str(Path.cwd()))
        module = importlib.import_module(module_name)
    result: int = module.main(argv)
    return result


def _bench(argv: list[str]) -> int:
    return _from_checkout("loadtests.cli", argv)


def _plan(argv: list[str]) -> int:
    """``specroute plan``: the fleet planner (``loadtests/planning/planner.py``)."""
    return _from_checkout("loadtests.planning.planner", argv)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specroute", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve", help="run the gateway (no --config: an embedded simulated fleet)"
    )
    serve.add_argument("--config", type=Path, help="policy YAML file (watched for changes)")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--workers", type=int, default=None)
    serve.add_argument("--redis-url", default=None)
    serve.add_argument("--admin-token", default=None)
    serve.add_argument("--upstream", choices=["h1", "aiohttp", "httpx"], default=None)
    serve.add_argument("--log-level", default=None)
    serve.add_argument(
        "--log-format", choices=["text", "json"], default=None, help="json: one object per line"
    )
    serve.add_argument(
        "--access-log",
        action="store_true",
        help="one line per relayed request (id, tenant, class, backend, reason, status, TTFT)",
    )
    serve.add_argument(
        "--sim-logs",
        action="store_true",
        help="let the embedded simulators log their own uvicorn lines",
    )
    serve.add_argument(
        "--traffic-log", type=Path, default=None, help="write one JSON line per request here"
    )
    serve.add_argument(
        "--keys-file", type=Path, default=None, help="API keys and tenants (default: open)"
    )
    serve.set_defaults(func=_serve)

    epp = sub.add_parser(
        "epp",
        help="run as the Endpoint Picker of an Envoy-based gateway (ext_proc over gRPC)",
    )
    epp.add_argument("--config", type=Path, help="policy YAML file (watched for changes)")
    epp.add_argument("--host", default=None, help="address of all three ports")
    epp.add_argument("--grpc-port", type=int, default=None, help="ext_proc (default 9002)")
    epp.add_argument("--health-port", type=int, default=None, help="gRPC health (default 9003)")
    epp.add_argument(
        "--http-port", type=int, default=None, help="admin, /metrics, /ui (default 9090)"
    )
    epp.add_argument(
        "--grpc-tls",
        choices=["self-signed", "files", "off"],
        default=None,
        help="ext_proc's TLS (default self-signed, made at start)",
    )
    epp.add_argument("--grpc-cert", type=Path, default=None, help="with --grpc-tls files")
    epp.add_argument("--grpc-key", type=Path, default=None, help="with --grpc-tls files")
    epp.add_argument(
        "--fallback-endpoints",
        type=int,
        default=None,
        help="addresses after the primary, for data planes that retry down the list (0)",
    )
    epp.add_argument("--redis-url", default=None)
    epp.add_argument("--admin-token", default=None)
    epp.add_argument("--log-level", default=None)
    epp.add_argument("--log-format", choices=["text", "json"], default=None)
    epp.add_argument("--keys-file", type=Path, default=None, help="API keys and tenants")
    epp.set_defaults(func=_epp)

    keys = sub.add_parser("keys", help="API keys for the keys file")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    hashed = keys_sub.add_parser(
        "new", help="a new key and its sha256 (give KEY to hash an existing one)"
    )
    hashed.add_argument("key", nargs="?", default=None)
    hashed.set_defaults(func=_keys)

    policy = sub.add_parser("policy", help="policy tools")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True)
    validate = policy_sub.add_parser("validate", help="check policy files offline")
    validate.add_argument("files", nargs="+", type=Path)
    validate.set_defaults(func=_validate)

    check = sub.add_parser(
        "check",
        help="check policies with their engines' vLLM launch configs offline "
        "(speculation, metrics flag, served name, draft vocabulary, shadow reference)",
    )
    check.add_argument("files", nargs="+", type=Path, help="policy files")
    check.add_argument(
        "--models",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="where models named in launch configs are found: a download directory "
        "(DIR/<org>/<name>) or a Hugging Face cache; repeatable",
    )
    check.set_defaults(func=_check)

    sub.add_parser(
        "sim", help="run a simulated vLLM backend (see 'specroute sim --help')", add_help=False
    )
    sub.add_parser("bench", help="benchmarks (see 'specroute bench --help')", add_help=False)
    sub.add_parser(
        "plan", help="fleet composition for a trace (see 'specroute plan --help')", add_help=False
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # sim, bench and plan own their whole argument lists.
    if argv and argv[0] == "sim":
        from proxy.sim.cli import main as sim_main

        return sim_main(argv[1:])
    if argv and argv[0] == "bench":
        return _bench(argv[1:])
    if argv and argv[0] == "plan":
        return _plan(argv[1:])
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
