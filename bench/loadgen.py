"""Many small requests from several processes, so that the load generator is not what is measured.

``run_load`` splits C keep-alive connections over P processes (``spawn``: no CUDA or thread state is
inherited). Each process is one asyncio loop (uvloop when installed) with its share of the
connections, each connection a closed loop over the minimal client in ``bench.http1``: send, read the
whole answer, send the next. The fixed number of requests is split over the processes in proportion
to their connections; every request is sent at most once and counted once, as answered (2xx) or
failed (any other status, or a transport error).

Timing: each process builds its bodies, opens its connections and sends one untimed warm-up request
per connection, then reports ready; when all are ready the parent notes the time and releases them
together. A cell's elapsed time runs from that release to the last 2xx answer in any process
(``time.monotonic`` is the system-wide CLOCK_MONOTONIC on Linux, so the clocks agree). Each process
sends back its latencies, answered request indices, status counts and its own CPU time; the parent
merges them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import multiprocessing
import queue
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, Protocol

from bench.http1 import Connection, ProtocolError, host_port

START_TIMEOUT_S: Final = 60.0  # a process spawned, imported and connected
REQUEST_TIMEOUT_S: Final = 180.0  # one request, the warm-up included (a CPU server's 32 x 32 wave is slow)
READY_TIMEOUT_S: Final = START_TIMEOUT_S + REQUEST_TIMEOUT_S
DRAIN_TIMEOUT_S: Final = 300.0
FAILURE_PAUSE_S: Final = 0.1
MSGPACK: Final = "application/msgpack"
JSON: Final = "application/json"
REQUEST_ERRORS: Final = (OSError, EOFError, asyncio.LimitOverrunError, ProtocolError, ValueError)


class LoadGenError(RuntimeError):
    """A load generator process failed (not a request: those are counted)."""


class BodyBuilder(Protocol):
    """Picklable: it travels to every process, which calls it once per request index."""

    @property
    def content_type(self) -> str: ...

    @property
    def accept(self) -> str: ...

    def __call__(self, request: int) -> bytes: ...


class Wire(StrEnum):
    MSGPACK = "msgpack"  # our /v1/encode/{model}: {"items": [{"text": ...}]}
    JSON = "json"  # OpenAI /v1/embeddings: {"model": ..., "input": [...]}


@dataclass(frozen=True)
class TextBodies:
    """Request ``i`` carries the next ``per_request`` texts of the pool, round-robin from text
    ``i * per_request``, so a cell walks the pool in order from its start, as bench/load.py does."""

    texts: tuple[str, ...]
    per_request: int
    wire: Wire
    model: str = ""  # named in JSON bodies

    @property
    def content_type(self) -> str:
        return MSGPACK if self.wire is Wire.MSGPACK else JSON

    @property
    def accept(self) -> str:
        return self.content_type

    def text_indices(self, request: int) -> list[int]:
        start = request * self.per_request
        return [(start + j) % len(self.texts) for j in range(self.per_request)]

    def __call__(self, request: int) -> bytes:
        batch = [self.texts[i] for i in self.text_indices(request)]
        if self.wire is Wire.JSON:
            return json.dumps({"model": self.model, "input": batch}).encode()
        import msgpack

        return bytes(msgpack.packb({"items": [{"text": text} for text in batch]}, use_bin_type=True))


@dataclass(frozen=True)
class _Job:
    index: int
    base_url: str
    route: str
    bodies: BodyBuilder
    requests: tuple[int, ...]  # request indices this process sends
    connections: int
    warm_up: bool
    max_seconds: float


@dataclass
class ChildReport:
    index: int
    latencies_s: list[float] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)  # request indices answered 2xx
    statuses: Counter[int] = field(default_factory=Counter)  # every timed answer's status
    failed: int = 0
    error_sample: str = ""
    last_answer: float = 0.0  # time.monotonic() of the last 2xx answer
    cpu_s: float = 0.0
    crash: str = ""  # the process itself failed

    def fail(self, message: str) -> None:
        self.failed += 1
        self.error_sample = self.error_sample or message[:300]


@dataclass
class LoadReport:
    requests: int  # timed requests sent: answered + failed
    answered: list[int]  # request indices answered 2xx, in no particular order
    latencies_s: list[float]
    statuses: dict[int, int]
    failed: int
    elapsed_s: float  # release to the last 2xx answer
    generator_cpu_s: float  # all generator processes, timed part
    processes: int
    error_sample: str = ""


def split(total: int, weights: list[int]) -> list[int]:
    """``total`` in whole parts proportional to ``weights`` (cumulative rounding: they sum exactly)."""
    whole = sum(weights)
    bounds, running = [0], 0
    for weight in weights:
        running += weight
        bounds.append(round(total * running / whole))
    return [b - a for a, b in itertools.pairwise(bounds)]


def _retry_after_s(headers: dict[str, str]) -> float:
    try:
        return min(float(headers.get("retry-after", FAILURE_PAUSE_S)), 1.0)
    except ValueError:
        return FAILURE_PAUSE_S


async def _connection_loop(
    conn: Connection, pending: deque[int], bodies: dict[int, bytes], job: _Job, tally: ChildReport
) -> None:
    clock, deadline = time.monotonic, time.monotonic() + job.max_seconds
    ctype, accept = job.bodies.content_type, job.bodies.accept
    while pending and clock() < deadline:
        index = pending.popleft()
        start = clock()
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                answer = await conn.post(job.route, bodies[index], ctype, accept)
        except REQUEST_ERRORS as exc:
            tally.fail(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(FAILURE_PAUSE_S)
            continue
        end = clock()
        tally.statuses[answer.status] += 1
        if 200 <= answer.status < 300:
            tally.latencies_s.append(end - start)
            tally.answered.append(index)
            tally.last_answer = max(tally.last_answer, end)
        else:
            tally.fail(f"HTTP {answer.status}: {answer.body[:200]!r}")
            await asyncio.sleep(_retry_after_s(answer.headers))


async def _warm_up(conn: Connection, route: str, body: bytes, bodies: BodyBuilder) -> None:
    async with asyncio.timeout(REQUEST_TIMEOUT_S):
        await conn.post(route, body, bodies.content_type, bodies.accept)


async def _child_main(job: _Job, ready: Any, go: Any) -> ChildReport:
    tally = ChildReport(job.index)
    bodies = {index: job.bodies(index) for index in job.requests}
    host, port = host_port(job.base_url)
    conns = [Connection(host, port) for _ in range(job.connections)]
    try:
        if job.warm_up and job.requests:
            first = bodies[job.requests[0]]
            warm = [_warm_up(c, job.route, first, job.bodies) for c in conns]
            for result in await asyncio.gather(*warm, return_exceptions=True):
                if isinstance(result, BaseException):
                    tally.error_sample = tally.error_sample or f"warm-up: {type(result).__name__}: {result}"
        ready.put(job.index)
        if not await asyncio.to_thread(go.wait, READY_TIMEOUT_S):
            raise LoadGenError(f"process {job.index}: never released")
        cpu0, pending = time.process_time(), deque(job.requests)
        await asyncio.gather(*(_connection_loop(c, pending, bodies, job, tally) for c in conns))
        tally.cpu_s = time.process_time() - cpu0
    finally:
        for conn in conns:
            await conn.close()
    return tally


def _run(coro: Coroutine[Any, Any, ChildReport]) -> ChildReport:
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def _child(job: _Job, ready: Any, go: Any, results: Any) -> None:
    try:
        report = _run(_child_main(job, ready, go))
    except BaseException:  # the outermost edge of this process: the parent raises it with the text
        report = ChildReport(job.index, crash=traceback.format_exc()[-3000:])
    results.put(report)


def _jobs(
    base_url: str,
    route: str,
    bodies: BodyBuilder,
    concurrency: int,
    processes: int,
    requests: int,
    warm_up: bool,
    max_seconds: float,
) -> list[_Job]:
    conns = split(concurrency, [1] * max(1, min(processes, concurrency)))
    shares = split(requests, conns)
    jobs, start = [], 0
    for index, (count, share) in enumerate(zip(conns, shares, strict=True)):
        indices = tuple(range(start, start + share))
        jobs.append(_Job(index, base_url, route, bodies, indices, count, warm_up, max_seconds))
        start += share
    return jobs


def _wait_all(procs: list[Any], channel: Any, results: Any, timeout_s: float, what: str) -> list[Any]:
    """One message per process from ``channel``; raises with the child's traceback if one dies
    first (a crashed child puts its report on ``results`` before it exits)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < len(procs):
        try:
            got.append(channel.get(timeout=0.5))
            continue
        except queue.Empty:
            pass
        exited = [p for p in procs if p.exitcode is not None]
        if exited and (channel is not results or len(exited) == len(procs)):
            try:
                report = results.get(timeout=2.0) if channel is not results else None
            except queue.Empty:
                report = None
            crash = report.crash if isinstance(report, ChildReport) else f"exit code {exited[0].exitcode}"
            raise LoadGenError(f"load generator process exited before it {what}:\n{crash}")
        if time.monotonic() > deadline:
            raise LoadGenError(f"load generator: {len(got)} of {len(procs)} processes {what} in time")
    return got


def run_load(
    base_url: str,
    route: str,
    bodies: BodyBuilder,
    concurrency: int,
    processes: int,
    requests: int,
    *,
    warm_up: bool = True,
    max_seconds: float = 60.0,
    on_release: Callable[[], None] | None = None,
) -> LoadReport:
    """Sends ``requests`` POSTs to ``base_url + route`` over ``concurrency`` connections spread over
    ``processes`` processes (at most one per connection); blocks until every answer is in.
    ``on_release`` runs after the warm-up, right before the timed part starts (to read counters that
    must not include the warm-up, such as the server's CPU time)."""
    ctx = multiprocessing.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    jobs = _jobs(base_url, route, bodies, concurrency, processes, requests, warm_up, max_seconds)
    procs = [ctx.Process(target=_child, args=(job, ready, go, results), daemon=True) for job in jobs]
    for proc in procs:
        proc.start()
    try:
        _wait_all(procs, ready, results, READY_TIMEOUT_S, "became ready")
        if on_release is not None:
            on_release()
        released = time.monotonic()
        go.set()
        reports: list[ChildReport] = _wait_all(
            procs, results, results, max_seconds + DRAIN_TIMEOUT_S, "reported"
        )
    finally:
        for proc in procs:
            proc.join(timeout=5.0)
            if proc.is_alive():
                proc.terminate()
                proc.join()
    crashed = [r for r in reports if r.crash]
    if crashed:
        raise LoadGenError(f"load generator process {crashed[0].index} failed:\n{crashed[0].crash}")
    return _merge(reports, released)


def _merge(reports: list[ChildReport], released: float) -> LoadReport:
    answered = [i for r in reports for i in r.answered]
    last = max((r.last_answer for r in reports if r.answered), default=time.monotonic())
    statuses: Counter[int] = Counter()
    for report in reports:
        statuses.update(report.statuses)
    failed = sum(r.failed for r in reports)
    return LoadReport(
        requests=len(answered) + failed,
        answered=answered,
        latencies_s=[s for r in reports for s in r.latencies_s],
        statuses=dict(statuses),
        failed=failed,
        elapsed_s=max(last - released, 1e-9),
        generator_cpu_s=sum(r.cpu_s for r in reports),
        processes=len(reports),
        error_sample=next((r.error_sample for r in reports if r.error_sample), ""),
    )
