"""``GET /admin/sizes``' walk: every container the app holds, by path, bounded ones marked."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from starlette.datastructures import State

from proxy.gateway.admin_sizes import ITEMS, process_sizes, structure_sizes


@dataclass(slots=True)
class Window:
    samples: deque[float] = field(default_factory=lambda: deque(maxlen=5))


class Holder:
    def __init__(self) -> None:
        self.by_request: dict[str, int] = {f"r{n}": n for n in range(40)}
        self.windows = {"a": Window(), "b": Window()}
        self.pending: list[bytes] = [b"x", b"y"]
        self.me = self  # a cycle is walked once
        self.__private = [1, 2, 3]  # name-mangled attributes are the object's too


def test_every_container_is_found_by_its_path_and_deques_with_maxlen_are_bounded() -> None:
    state = State()
    holder = Holder()
    holder.windows["a"].samples.extend([1.0, 2.0, 3.0])
    state.holder = holder
    state.name = "gateway"
    found = structure_sizes(state)
    assert found.sizes["holder.by_request"] == 40
    assert found.sizes["holder.pending"] == 2
    assert found.sizes["holder.windows"] == 2
    assert found.sizes["holder.windows[a].samples"] == 3
    assert found.sizes["holder._Holder__private"] == 3
    assert found.bounds == {"holder.windows[a].samples": 5, "holder.windows[b].samples": 5}
    assert not any(path.startswith("holder.me") for path in found.sizes)


def test_a_big_container_is_measured_but_only_its_first_items_looked_into() -> None:
    state = State()
    state.table = {n: Window() for n in range(ITEMS * 4)}
    found = structure_sizes(state)
    assert found.sizes["table"] == ITEMS * 4
    assert len([p for p in found.sizes if p.startswith("table[")]) == ITEMS


async def test_the_task_count_is_the_running_loops() -> None:
    before = process_sizes()["asyncio_tasks"]
    tasks = [asyncio.create_task(asyncio.sleep(1)) for _ in range(5)]
    assert process_sizes()["asyncio_tasks"] == before + 5
    for task in tasks:
        task.cancel()
