"""The process's memory as its allocators see it, for the soak's judgement of growth.

RSS alone cannot tell a leak from an allocator keeping pages: Python's own allocator
(pymalloc) holds small objects in arenas it returns only when they are wholly empty, and
glibc's malloc keeps freed memory for reuse. ``sys.getallocatedblocks()`` counts the
Python objects' blocks in use, and glibc's ``mallinfo2`` the C heap's bytes in use and
free; a soak samples them beside RSS (``GET /admin/sizes``).

That is how the last of the soak's growth was told apart: over an hour of steady traffic
Python's blocks and the C heap in use stayed flat while the heap's *free* bytes rose with
RSS, +13 MiB each (issue 41): freed chunks that glibc keeps in the middle of its heaps
(the bodies, buffers and responses of requests, larger than pymalloc's 512 bytes), which
it returns to the system only from the top. :func:`release_free_heap` hands them back
(``malloc_trim``, which since glibc 2.8 also gives back the free pages inside every
arena); the gateway calls it every ``memory_trim_interval_s``.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import sys
from collections.abc import Callable

MIB = 1024.0 * 1024.0

# The young generation's threshold while serving. A relayed request allocates a few
# hundred objects that live until its response ends; with Python's default (700) the
# young generation is collected every couple of requests, walking every in-flight
# request's objects each time.
GC_YOUNG_THRESHOLD = 20_000


def settle_collector() -> tuple[int, ...]:
    """Set the cycle collector up for serving, as the gateway does once started: what
    exists now (imports, the policy, plugins) moved out of its view (fewer long pauses
    later, and no copy-on-write of it), and the young threshold raised. Returns the
    thresholds before, for :func:`unsettle_collector`."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *before[1:])
    return before


def unsettle_collector(before: tuple[int, ...]) -> None:
    """Undo :func:`settle_collector` (a benchmark's run ends; the process goes on)."""
    gc.unfreeze()
    gc.set_threshold(*before)


class _MallInfo2(ctypes.Structure):
    # glibc >= 2.33 ``struct mallinfo2`` (malloc.h): every field a size_t.
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _libc() -> ctypes.CDLL:
    """The symbols the process has loaded, the C library's among them (``dlopen(NULL)``:
    no search of the library path, unlike ``ctypes.util.find_library``, which runs
    ``ldconfig`` each time)."""
    return ctypes.CDLL(None)


def _trimmer() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, where the C library is glibc."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
    return trim


def release_free_heap() -> bool:
    """Give the C heap's free pages back to the system (glibc ``malloc_trim(0)``); False
    where there is no glibc. Takes about a millisecond for a heap of tens of MiB."""
    trim = _trimmer()
    if trim is None:
        return False
    trim(0)
    return True


async def keep_heap_trimmed(interval_s: float) -> None:
    """``malloc_trim(0)`` every ``interval_s`` (the gateway's background task); returns at
    once where there is no glibc."""
    trim = _trimmer()
    if trim is None:
        return
    while True:
        await asyncio.sleep(interval_s)
        trim(0)


def allocator_sizes() -> dict[str, float]:
    """Python's allocated blocks, and on glibc the C heap's MiB in use and free."""
    out = {"python_blocks": float(sys.getallocatedblocks())}
    info = getattr(_libc(), "mallinfo2", None)  # glibc >= 2.33
    if info is not None:
        info.restype = _MallInfo2
        got = info()
        out["malloc_in_use_mib"] = (got.uordblks + got.hblkhd) / MIB
        out["malloc_free_mib"] = got.fordblks / MIB
    return out
