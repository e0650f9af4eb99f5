"""Export the fleet-wide traffic log (the store's ``traffic`` log, a Redis stream when the
gateways share Redis: ``SPECROUTE_TRAFFIC_LOG_STORE=true``) to a JSON lines file that
``specroute bench replay`` and ``specroute plan`` read like a replica's own log file.

    python -m loadtests.planning.traffic_export --redis-url redis://host:6379/0 --out traffic.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path

import orjson

from proxy.gateway.traffic_log import STORE_LOG
from proxy.store.base import Store
from proxy.store.redis import RedisStore


async def export(store: Store, path: Path, batch: int = 1000) -> int:
    """Every entry of the store's traffic log, oldest first, as JSON lines; the count."""
    written, cursor = 0, None
    with path.open("wb") as fh:
        while True:
            entries = await store.read_after(STORE_LOG, cursor, batch)
            if not entries:
                return written
            for entry in entries:
                fh.write(orjson.dumps(entry.record) + b"\n")
            written += len(entries)
            cursor = entries[-1].cursor


async def _main(url: str, path: Path, prefix: str) -> int:
    store = RedisStore(url, key_prefix=prefix)
    await store.start()
    try:
        return await export(store, path)
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--key-prefix", default="specroute:")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    count = asyncio.run(_main(args.redis_url, args.out, args.key_prefix))
    print(f"{args.out}: {count} requests")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
