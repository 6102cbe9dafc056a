"""Closed-loop load: C asyncio workers, each sending its next request as soon as the previous answers.

Texts are taken round-robin from a pool (the corpus or the query set) through one shared cursor that
restarts at 0 in every cell, so every server sees the same requests in the same order. A cell runs a
warm-up (requests sent, nothing recorded), then a measuring window that ends after ``seconds`` or
after ``max_requests`` recorded answers, whichever comes first. Only answers that arrive inside the
window count; answers still in flight when it closes are awaited but not counted. Nothing is logged
per request.

Throughput is measured between completions, not between the window's edges: a saturated server
answers in bursts (one forward batch finishes many requests at once, maybe a second apart), so items
per fixed window would be off by up to a burst. The rate is the items answered after the first burst
in the window (answers within ``BURST_S`` of the first one) up to the last answer, divided by the time
between that burst's last answer and the window's last answer; with fewer than two bursts it falls
back to items in window / window length.

Latency is steady-state only if every worker had an answer before the window opened (``steady``);
otherwise (a queue deeper than the warm-up) the window holds only the first-served requests of the
initial burst and the percentiles understate the steady-state latency. ``Budget.steady`` extends the
warm-up until that holds.

After a failed request a worker waits (the answer's ``Retry-After``, at most 1 s, else 0.1 s) before
its next one, as a client would, so an overloaded server is not hammered in a tight error loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass

from bench import procs
from bench.clients import RequestFailed, Sender
from bench.stats import CellResult, CellSpec, percentiles_ms

DRAIN_TIMEOUT_S = 300.0
BURST_S = 0.025


@dataclass(frozen=True)
class Budget:
    warmup_s: float = 1.0
    seconds: float = 6.0
    max_requests: int | None = None
    steady: bool = False  # extend the warm-up until every worker has had an answer (at most STEADY_CAP_S)


STEADY_CAP_S = 120.0


class _Cell:
    def __init__(self, sender: Sender, spec: CellSpec, texts: list[str], tokens: list[int]) -> None:
        self.sender, self.spec, self.texts, self.tokens = sender, spec, texts, tokens
        self.cursor = 0
        self.recording = False
        self.stopping = False
        self.latencies: list[float] = []
        self.answers: list[tuple[float, int, int]] = []  # (answered at, items, tokens) in the window
        self.errors = 0
        self.error_sample = ""
        self.limit_reached = asyncio.Event()
        self.max_requests: int | None = None
        self.answered_workers = 0  # workers with at least one answer so far
        self.all_answered = asyncio.Event()

    def _next_batch(self) -> tuple[list[str], int]:
        n = len(self.texts)
        indices = [(self.cursor + j) % n for j in range(self.spec.batch)]
        self.cursor = (self.cursor + self.spec.batch) % n
        return [self.texts[i] for i in indices], sum(self.tokens[i] for i in indices)

    async def worker(self) -> None:
        clock = time.perf_counter
        first = True
        while not self.stopping:
            batch, tokens = self._next_batch()
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
            if first:
                first = False
                self.answered_workers += 1
                if self.answered_workers == self.spec.concurrency:
                    self.all_answered.set()
            if self.recording:
                self.latencies.append(end - start)
                self.answers.append((end, len(batch), tokens))
                if self.max_requests is not None and len(self.latencies) >= self.max_requests:
                    self.limit_reached.set()


def rate_span(answers: list[tuple[float, int, int]], window_s: float) -> tuple[float, int, int]:
    """(seconds, items, tokens) to divide for the rate: from the end of the first burst of answers to
    the last answer; the whole window when the answers form fewer than two bursts."""
    total_items, total_tokens = sum(a[1] for a in answers), sum(a[2] for a in answers)
    if not answers:
        return window_s, 0, 0
    first = answers[0][0]
    burst = [a for a in answers if a[0] - first <= BURST_S]
    rest = answers[len(burst) :]
    if not rest:
        return window_s, total_items, total_tokens
    span = rest[-1][0] - burst[-1][0]
    return span, sum(a[1] for a in rest), sum(a[2] for a in rest)


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
    cell.max_requests = budget.max_requests
    statuses_before = Counter(sender.statuses)
    workers = [asyncio.create_task(cell.worker()) for _ in range(spec.concurrency)]
    try:
        await asyncio.sleep(budget.warmup_s)
        if budget.steady:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cell.all_answered.wait(), STEADY_CAP_S)
        steady = cell.all_answered.is_set()
        cpu0, own0, busy0 = (
            procs.cpu_seconds(server_pid),
            procs.own_cpu_seconds(),
            procs.machine_busy_seconds(),
        )
        start = time.perf_counter()
        cell.recording = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(cell.limit_reached.wait(), timeout=budget.seconds)
        cell.recording = False
        window = time.perf_counter() - start
        cpu1, own1, busy1 = (
            procs.cpu_seconds(server_pid),
            procs.own_cpu_seconds(),
            procs.machine_busy_seconds(),
        )
        cell.stopping = True
        try:
            await asyncio.wait_for(asyncio.gather(*workers, return_exceptions=True), DRAIN_TIMEOUT_S)
        except TimeoutError:
            cell.error_sample = (
                cell.error_sample or f"requests unanswered {DRAIN_TIMEOUT_S:.0f} s after the window"
            )
    finally:
        cell.stopping = True
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    p50, p95, p99, worst = percentiles_ms(cell.latencies)
    rate_s, rate_items, rate_tokens = rate_span(cell.answers, window)
    server_cpu, own_cpu = cpu1 - cpu0, own1 - own0
    return CellResult(
        server=server_name,
        spec=spec,
        requests=len(cell.latencies),
        items=sum(a[1] for a in cell.answers),
        tokens=sum(a[2] for a in cell.answers),
        window_s=window,
        rate_span_s=rate_s,
        rate_items=rate_items,
        rate_tokens=rate_tokens,
        steady=steady,
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
