"""The process's memory as its allocators see it, for the soak's judgement of growth.

RSS alone cannot tell a leak from an allocator keeping pages: Python's own allocator
(pymalloc) holds small objects in arenas it returns only when they are wholly empty, and
glibc's malloc keeps freed memory for reuse. ``sys.getallocatedblocks()`` counts the
Python objects' blocks in use, and glibc's ``mallinfo2`` the C heap's bytes in use and
free; a soak samples them beside RSS (``GET /admin/sizes``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

MIB = 1024.0 * 1024.0


class _MallInfo2(ctypes.Structure):
    # glibc >= 2.33 ``struct mallinfo2`` (malloc.h): every field a size_t.
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def allocator_sizes() -> dict[str, float]:
    """Python's allocated blocks, and on glibc the C heap's MiB in use and free."""
    out = {"python_blocks": float(sys.getallocatedblocks())}
    info = getattr(_libc(), "mallinfo2", None)
    if info is not None:
        info.restype = _MallInfo2
        got = info()
        out["malloc_in_use_mib"] = (got.uordblks + got.hblkhd) / MIB
        out["malloc_free_mib"] = got.fordblks / MIB
    return out
