"""Closed-loop load over a fixed amount of work: C asyncio workers, each sending its next request as
soon as the previous one answers, until the cell's request count has been sent; then the cell waits
for every answer.

Why a fixed count and not a time window: a saturated server answers in bursts (one forward batch
finishes several requests at once, a second or more apart), so a few seconds' window sees a handful
of bursts and its rate swings by 2x between runs depending on where the edges fall. Timing a fixed
amount of work from the first send to the last answer has no edges to fall between bursts, and every
request sent is counted. The tail, where the last requests drain with fewer in flight, makes the rate
slightly conservative.

Before the timed part every worker sends one single-item warm-up request and all of them are
awaited: the connections are open and the server has run a forward pass, so the first timed wave
measures serving, not start-up. Because the loop is closed (always C requests in flight), latency is
steady-state from the first timed request.

Texts are taken round-robin from a pool (the corpus or the query set) through one shared cursor that
restarts at 0 in every cell, so every server sees the same requests in the same order. Nothing is
logged per request. After a failed request a worker waits (the answer's ``Retry-After``, at most 1 s,
else 0.1 s) before its next one, as a client would; a failed request counts as sent, so a failing
server cannot keep a cell running.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from dataclasses import dataclass

from bench import procs
from bench.clients import RequestFailed, Sender
from bench.stats import CellResult, CellSpec, percentiles_ms

DRAIN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Budget:
    """How much work a cell times: ``items`` items for multi-item cells, a quarter as many single-item
    requests (each costs a round trip, not a batch), and never fewer than two requests per worker.
    ``max_seconds`` stops sending early on a slow server; what was sent is still awaited and counted."""

    items: int = 2048
    max_seconds: float = 60.0

    def requests(self, spec: CellSpec) -> int:
        target = self.items if spec.batch > 1 else max(1, self.items // 4)
        return max(2 * spec.concurrency, math.ceil(target / spec.batch))


class _Cell:
    def __init__(self, sender: Sender, spec: CellSpec, texts: list[str], tokens: list[int]) -> None:
        self.sender, self.spec, self.texts, self.tokens = sender, spec, texts, tokens
        self.cursor = 0
        self.to_send = 0
        self.deadline = math.inf
        self.latencies: list[float] = []
        self.last_answer = 0.0
        self.items = 0
        self.token_count = 0
        self.errors = 0
        self.error_sample = ""

    def _next_batch(self, size: int) -> tuple[list[str], int]:
        n = len(self.texts)
        indices = [(self.cursor + j) % n for j in range(size)]
        self.cursor = (self.cursor + size) % n
        return [self.texts[i] for i in indices], sum(self.tokens[i] for i in indices)

    async def warm_up(self) -> None:
        batch, _ = self._next_batch(1)
        try:
            await self.sender.send(batch)
        except Exception as exc:  # a failing server shows up in the timed part
            self.error_sample = f"warm-up: {type(exc).__name__}: {exc}"[:300]

    async def worker(self) -> None:
        clock = time.perf_counter
        while self.to_send > 0 and clock() < self.deadline:
            self.to_send -= 1
            batch, tokens = self._next_batch(self.spec.batch)
            start = clock()
            try:
                await self.sender.send(batch)
            except Exception as exc:  # any failure counts; the cell goes on
                self.errors += 1
                if not self.error_sample:
                    self.error_sample = f"{type(exc).__name__}: {exc}"[:300]
                pause = exc.retry_after_s if isinstance(exc, RequestFailed) else 0.1
                await asyncio.sleep(pause or 0.1)
                continue
            end = clock()
            self.latencies.append(end - start)
            self.last_answer = max(self.last_answer, end)
            self.items += len(batch)
            self.token_count += tokens


async def run_cell(
    server_name: str,
    server_pid: int,
    sender: Sender,
    spec: CellSpec,
    texts: list[str],
    tokens: list[int],
    budget: Budget,
) -> CellResult:
    cell = _Cell(sender, spec, texts, tokens)
    await asyncio.gather(*(cell.warm_up() for _ in range(spec.concurrency)))
    cell.cursor = 0
    cell.to_send = budget.requests(spec)
    statuses_before = Counter(sender.statuses)
    cpu0, own0, busy0 = procs.cpu_seconds(server_pid), procs.own_cpu_seconds(), procs.machine_busy_seconds()
    start = time.perf_counter()
    cell.deadline = start + budget.max_seconds
    workers = [asyncio.create_task(cell.worker()) for _ in range(spec.concurrency)]
    try:
        await asyncio.wait_for(asyncio.gather(*workers), budget.max_seconds + DRAIN_TIMEOUT_S)
    except TimeoutError:
        cell.error_sample = cell.error_sample or "requests unanswered long after sending stopped"
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    end = cell.last_answer if cell.latencies else time.perf_counter()
    cpu1, own1, busy1 = procs.cpu_seconds(server_pid), procs.own_cpu_seconds(), procs.machine_busy_seconds()
    p50, p95, p99, worst = percentiles_ms(cell.latencies)
    server_cpu, own_cpu = cpu1 - cpu0, own1 - own0
    return CellResult(
        server=server_name,
        spec=spec,
        requests=len(cell.latencies),
        items=cell.items,
        tokens=cell.token_count,
        elapsed_s=max(end - start, 1e-9),
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        max_ms=worst,
        errors=cell.errors,
        server_cpu_s=server_cpu,
        bench_cpu_s=own_cpu,
        other_cpu_s=max(0.0, (busy1 - busy0) - server_cpu - own_cpu),
        statuses=dict(Counter(sender.statuses) - statuses_before),
        error_sample=cell.error_sample,
    )
