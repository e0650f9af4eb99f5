"""The allocators' view of the heap, as /admin/sizes reports it."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes.util
import gc
from pathlib import Path

from proxy.memory import (
    GC_YOUNG_THRESHOLD,
    allocator_sizes,
    keep_heap_trimmed,
    release_free_heap,
    settle_collector,
    unsettle_collector,
)


def test_the_heap_is_described_and_glibcs_figures_where_it_is() -> None:
    sizes = allocator_sizes()
    assert sizes["python_blocks"] > 0
    kept = [bytearray(4096) for _ in range(256)]  # 256 more objects in Python's blocks
    assert allocator_sizes()["python_blocks"] >= sizes["python_blocks"] + 200
    del kept
    if ctypes.util.find_library("c") is not None and "malloc_in_use_mib" in sizes:
        assert sizes["malloc_in_use_mib"] > 0 and sizes["malloc_free_mib"] >= 0


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_freed_heap_pages_are_handed_back() -> None:
    # 64 KiB blocks (under glibc's mmap threshold: inside the heap), every other one freed:
    # holes of whole pages between live blocks, which the heap keeps until trimmed (the
    # soak's growth: free bytes rising with RSS, the bytes in use flat).
    blocks = [bytearray(b"x" * 65536) for _ in range(400)]
    del blocks[::2]
    before = rss_mib()
    assert release_free_heap() is True
    assert rss_mib() < before - 6  # ~12 MiB of holes; at least half of it handed back
    del blocks


async def test_the_trim_task_runs_until_cancelled() -> None:
    task = asyncio.create_task(keep_heap_trimmed(0.01))
    await asyncio.sleep(0.05)
    assert not task.done()  # glibc here: it keeps trimming
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def test_the_collector_is_settled_for_serving_and_restored() -> None:
    before = gc.get_threshold()
    saved = settle_collector()
    try:
        assert saved == before
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > 0
    finally:
        unsettle_collector(saved)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
