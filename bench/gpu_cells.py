"""What our server is measured with in a device run: vector agreement with raw float32, the
10-word query latency through our SDK (bench/load.py's closed loop, as in the CPU run), and the
concurrency-1, 32 x 32 and 64 x 1 cells through the multi-process HTTP/1.1 generator
(bench/loadgen.py), whose answers are turned into the same ``CellResult`` as bench/load.py's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bench import procs, servers
from bench.clients import SdkSender
from bench.gpu_options import DeviceOptions
from bench.gpu_results import BATCHED, MANY_SINGLE, QUERY_HTTP, QUERY_SDK, SINGLE, Agreement
from bench.load import Budget, run_cell
from bench.loadgen import LoadGenError, TextBodies, Wire, run_load
from bench.raw import normalised
from bench.report import CELL_HEADER, cell_line
from bench.stats import CellResult, CellSpec, percentiles_ms

CHECK_BATCH = 64  # items per request in the "batched" half of the vector comparison


@dataclass(frozen=True)
class Pool:
    texts: list[str]
    tokens: list[int]


async def agreement(server: servers.Server, sample: list[str], reference: np.ndarray) -> Agreement:
    sender = SdkSender(server.base_url, server.model, 4)
    try:
        alone = normalised(np.concatenate([await sender.vectors([text]) for text in sample]))
        parts = [
            await sender.vectors(sample[i : i + CHECK_BATCH]) for i in range(0, len(sample), CHECK_BATCH)
        ]
        batched = normalised(np.concatenate(parts))
    finally:
        await sender.aclose()
    return Agreement(
        texts=len(sample),
        min_cos_alone=float(np.min(np.sum(alone * reference, axis=1))),
        min_cos_batched=float(np.min(np.sum(batched * reference, axis=1))),
        min_cos_alone_vs_batched=float(np.min(np.sum(alone * batched, axis=1))),
        identical=int(np.sum(np.all(alone == batched, axis=1))),
    )


def vectors_line(found: Agreement) -> str:
    return (
        f"min cosine to raw float32 {found.min_cos_alone:.6f} alone, {found.min_cos_batched:.6f} in "
        f"requests of {CHECK_BATCH}; alone vs batched {found.min_cos_alone_vs_batched:.6f}, "
        f"{found.identical}/{found.texts} bit-identical"
    )


async def _sdk_cell(
    server: servers.Server, spec: CellSpec, pool: Pool, requests: int, opts: DeviceOptions
) -> CellResult:
    sender = SdkSender(server.base_url, server.model, spec.concurrency + 4)
    try:
        budget = Budget(items=4 * requests, max_seconds=opts.max_seconds)  # single-item: items / 4 requests
        return await run_cell("sie", server.pid, sender, spec, pool.texts, pool.tokens, budget)
    finally:
        await sender.aclose()


def http_cell(
    server: servers.Server, spec: CellSpec, pool: Pool, requests: int, processes: int, max_seconds: float
) -> CellResult:
    """One cell through the multi-process generator, as a CellResult like bench/load.py's."""
    bodies = TextBodies(tuple(pool.texts), spec.batch, Wire.MSGPACK)
    before: list[float] = []

    def released() -> None:  # after the warm-up: its CPU is not the cell's
        before.extend((procs.cpu_seconds(server.pid), procs.machine_busy_seconds()))

    report = run_load(
        server.base_url,
        f"/v1/encode/{server.model}",
        bodies,
        spec.concurrency,
        processes,
        requests,
        max_seconds=max_seconds,
        on_release=released,
    )
    server_cpu = procs.cpu_seconds(server.pid) - before[0]
    busy = procs.machine_busy_seconds() - before[1]
    text_indices = [j for i in report.answered for j in bodies.text_indices(i)]
    p50, p95, p99, worst = percentiles_ms(report.latencies_s)
    return CellResult(
        server="sie",
        spec=spec,
        requests=len(report.answered),
        items=len(text_indices),
        tokens=sum(pool.tokens[j] for j in text_indices),
        elapsed_s=report.elapsed_s,
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        max_ms=worst,
        errors=report.failed,
        server_cpu_s=server_cpu,
        bench_cpu_s=report.generator_cpu_s,
        other_cpu_s=max(0.0, busy - server_cpu - report.generator_cpu_s),
        statuses={code: n for code, n in report.statuses.items() if not 200 <= code < 300},
        error_sample=report.error_sample,
    )


def run_cells(
    runner: asyncio.Runner,
    server: servers.Server,
    corpus_pool: Pool,
    queries: Pool,
    opts: DeviceOptions,
    say: Callable[[str], None],
) -> tuple[list[CellResult], list[str]]:
    """The latency cell through our SDK, then the rest through the multi-process generator; each
    line is printed as its cell ends. A generator failure costs its cell only (returned as a
    problem; the cell's targets then read as not met), a dead server the rest."""
    say(CELL_HEADER)
    cells = [runner.run(_sdk_cell(server, QUERY_SDK, queries, opts.single_requests, opts))]
    say(cell_line(cells[-1]))
    problems: list[str] = []
    plan = [
        (QUERY_HTTP, queries, opts.single_requests, 1),
        (SINGLE, corpus_pool, opts.single_requests, 1),
        (BATCHED, corpus_pool, max(1, opts.items // BATCHED.batch), opts.loadgen_processes),
        (MANY_SINGLE, corpus_pool, max(1, opts.items // 2), opts.loadgen_processes),
    ]
    for spec, pool, requests, processes in plan:
        try:
            cells.append(http_cell(server, spec, pool, requests, processes, opts.max_seconds))
            say(cell_line(cells[-1]))
        except LoadGenError as exc:
            problems.append(f"{spec.key}: {exc}")
            say(f"  cell {spec.key} failed: {exc}")
        if server.process.exit_code() is not None:
            raise RuntimeError(f"server died under load:\n{server.process.log_tail()}")
    return cells, problems
