"""A generation's deadlines (``ops.generate.within``), timed against a stream whose pace the test sets:
each deadline ends the stream with ``GenerationTimeout`` naming its setting, the inter-chunk one only
when the events are streamed, and time spent by the reader never counts against the generation. The
server answers these as 504 / a terminal error chunk (``tests/e2e/test_generate.py``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from pydantic import ValidationError

from sie.catalog.model_config import AdapterOptions
from sie.engine.errors import GenerationTimeout
from sie.engine.ops.generate import Deadlines, within


async def paced(gaps: list[float]) -> AsyncIterator[int]:
    """One value after each gap (seconds), then the end."""
    for index, gap in enumerate(gaps):
        await asyncio.sleep(gap)
        yield index


async def read(
    deadlines: Deadlines, gaps: list[float], streamed: bool = True, pause: float = 0.0
) -> list[int]:
    got: list[int] = []
    async for value in within(paced(gaps), deadlines, time.perf_counter(), streamed):  # type: ignore[arg-type]
        got.append(value)
        await asyncio.sleep(pause)  # the reader's own time (a slow client)
    return got


async def test_no_deadlines_pass_every_event_through() -> None:
    assert await read(Deadlines(), [0.0, 0.02, 0.0]) == [0, 1, 2]


async def test_a_first_token_later_than_first_chunk_timeout_ends_the_stream() -> None:
    with pytest.raises(GenerationTimeout, match=r"made no first token within 0.05 s .*first_chunk_timeout_s"):
        await read(Deadlines(first_chunk_s=0.05), [0.5, 0.0])
    assert await read(Deadlines(first_chunk_s=0.5), [0.0, 0.2]) == [0, 1]  # it holds the first only


async def test_the_inter_chunk_timeout_holds_a_stream_and_not_a_whole_answer() -> None:
    gaps = [0.0, 0.0, 0.3]
    with pytest.raises(GenerationTimeout, match=r"made no next token within 0.1 s .*inter_chunk_timeout_s"):
        await read(Deadlines(inter_chunk_s=0.1), gaps)
    assert await read(Deadlines(inter_chunk_s=0.1), gaps, streamed=False) == [0, 1, 2]


async def test_the_overall_timeout_counts_from_the_start_and_wins_when_sooner() -> None:
    with pytest.raises(GenerationTimeout, match=r"did not finish within 0.15 s .*overall_timeout_s"):
        await read(Deadlines(inter_chunk_s=10, overall_s=0.15), [0.0] + [0.05] * 10)
    with pytest.raises(GenerationTimeout, match="overall_timeout_s"):
        await read(Deadlines(first_chunk_s=10, overall_s=0.05), [0.3])


async def test_a_slow_reader_is_not_the_generations_delay() -> None:
    # Each event waits 0.1 s in the reader, longer than the 0.05 s inter-chunk limit: not a timeout.
    assert await read(Deadlines(inter_chunk_s=0.05), [0.0, 0.0, 0.0], pause=0.1) == [0, 1, 2]


def test_deadlines_are_read_from_the_profiles_runtime_options() -> None:
    runtime = {"first_chunk_timeout_s": 30, "inter_chunk_timeout_s": 2.5, "overall_timeout_s": 300}
    assert Deadlines.of(runtime) == Deadlines(30.0, 2.5, 300.0)
    assert Deadlines.of({}) == Deadlines()


@pytest.mark.parametrize("value", [True, -1, 0, "300", [30]])
def test_a_deadline_that_is_not_a_positive_number_is_refused_with_the_yaml(value: object) -> None:
    runtime = {"overall_timeout_s": value}
    with pytest.raises(ValidationError, match="overall_timeout_s must be a positive number of seconds"):
        AdapterOptions(runtime=runtime)
    assert AdapterOptions(runtime={"overall_timeout_s": 0.5}).runtime == {"overall_timeout_s": 0.5}
