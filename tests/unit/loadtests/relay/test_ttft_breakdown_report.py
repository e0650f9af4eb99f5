"""The TTFT breakdown's table: CPU and wall per step, ``other`` as the span's remainder."""

from __future__ import annotations

from loadtests.relay.ttft_breakdown import AFTER, BEFORE, RESPONSE_START, WALL, WHILE, Clock, report


def row(cpu: int, wall: int) -> dict[str, int]:
    return {
        "classify": cpu,
        "classify" + WALL: wall,
        BEFORE: 3 * cpu,
        BEFORE + WALL: 3 * wall,
        RESPONSE_START: cpu,
        RESPONSE_START + WALL: 4 * wall,
        AFTER: 2 * cpu,
        AFTER + WALL: 5 * wall,
    }


def line(table: str, label: str) -> list[float]:
    found = next(text for text in table.splitlines() if text.strip().startswith(label))
    return [float(cell) for cell in found.split()[-4:]]


def test_each_step_has_cpu_and_wall_and_other_is_the_rest_of_its_span() -> None:
    table = report([row(10_000, 20_000)] * 5)
    assert line(table, "classify") == [10.0, 10.0, 20.0, 20.0]
    assert line(table, f"= {BEFORE}") == [30.0, 30.0, 60.0, 60.0]
    assert line(table, RESPONSE_START) == [10.0, 10.0, 80.0, 80.0]
    # Before the write: 30 - 10 CPU, 60 - 20 wall; after the first byte: 20 - 10, 100 - 80.
    others = [text for text in table.splitlines() if text.strip().startswith("other")]
    assert [[float(c) for c in text.split()[-4:]] for text in others] == [
        [20.0, 20.0, 40.0, 40.0],
        [10.0, 10.0, 20.0, 20.0],
    ]


def test_a_clock_row_spans_from_mark_to_mark_on_both_clocks() -> None:
    clock = Clock()
    for name in ("arrive", "write", "chunk", "body"):
        clock.mark(name)
    clock.close()
    (only,) = clock.rows
    assert only[BEFORE + WALL] >= 0 and only[AFTER + WALL] >= 0
    assert only[BEFORE] >= 0 and only[AFTER] >= 0
    assert clock.marks == {} and clock.steps == {}


def test_a_step_between_the_write_and_the_first_byte_is_listed_apart() -> None:
    clock = Clock()
    clock.mark("arrive")
    clock.add("schedule", (0, 0))
    clock.mark("write")
    clock.add("account (incl. forecast)", (0, 0))
    clock.mark("chunk")
    clock.mark("body")
    clock.close()
    (only,) = clock.rows
    assert "schedule" in only and "account (incl. forecast)" not in only
    assert "account (incl. forecast)" + WHILE in only
    table = report(clock.rows)
    before, meanwhile = table.split(WHILE.strip(" []"))
    assert "account" not in before and "account (incl. forecast)" in meanwhile
