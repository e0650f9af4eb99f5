"""The allocators' view of the heap, as /admin/sizes reports it."""

from __future__ import annotations

import ctypes.util

from proxy.memory import allocator_sizes


def test_the_heap_is_described_and_glibcs_figures_where_it_is() -> None:
    sizes = allocator_sizes()
    assert sizes["python_blocks"] > 0
    kept = [bytearray(4096) for _ in range(256)]  # 256 more objects in Python's blocks
    assert allocator_sizes()["python_blocks"] >= sizes["python_blocks"] + 200
    del kept
    if ctypes.util.find_library("c") is not None and "malloc_in_use_mib" in sizes:
        assert sizes["malloc_in_use_mib"] > 0 and sizes["malloc_free_mib"] >= 0
