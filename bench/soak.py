"""Memory under sustained load: one real server, N client processes, its RSS sampled for minutes.

Usage: ``PYTHONPATH=src .venv/bin/python -m bench.soak --duration 600 --clients 8``.

Each client is its own process (``spawn``) with one keep-alive connection in a closed loop: every
request draws 1-32 items of 3-150 words from the model's vocabulary and goes, at random, to the
msgpack route (``/v1/encode/{model}``) or the OpenAI route (``/v1/embeddings``), so the server sees
every batch shape and both encoders. The parent samples the server's RSS (its process tree, by pid)
every ``--sample-every`` seconds. RSS "after warm-up" is the first sample once ``--warm-up`` seconds
have passed; a flat server ends within a few percent of it. Throughput is items answered per minute
of the run, so a server that slows down as its heap grows shows it too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import queue
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench import corpus, procs, servers
from bench.http1 import Connection, host_port
from bench.machine import cpu_class

DEFAULT_MODEL: Final = "sentence-transformers/all-MiniLM-L6-v2"
MSGPACK: Final = "application/msgpack"
JSON: Final = "application/json"
REQUEST_TIMEOUT_S: Final = 120.0
ERROR_PAUSE_S: Final = 0.2


@dataclass(frozen=True)
class Mix:
    """What one request may hold: ``items`` and ``words`` are inclusive ranges."""

    items: tuple[int, int] = (1, 32)
    words: tuple[int, int] = (3, 150)


@dataclass
class ClientReport:
    index: int
    ok: int = 0
    items_by_minute: Counter[int] = field(default_factory=Counter)  # minute of the run -> items answered
    statuses: Counter[str] = field(default_factory=Counter)  # "200", "503", "OSError", ...
    error_sample: str = ""
    crash: str = ""


def make_body(rng: random.Random, vocab: list[str], mix: Mix, model: str) -> tuple[str, str, bytes]:
    """(route, content type, body) of one request: a msgpack encode or an OpenAI embeddings call."""
    texts = [
        " ".join(rng.choice(vocab) for _ in range(rng.randint(*mix.words)))
        for _ in range(rng.randint(*mix.items))
    ]
    if rng.random() < 0.5:
        import msgpack

        body = msgpack.packb({"items": [{"text": t} for t in texts]}, use_bin_type=True)
        return f"/v1/encode/{model}", MSGPACK, bytes(body)
    return servers.SIE_JSON_ROUTE, JSON, json.dumps({"model": model, "input": texts}).encode()


def items_in(content_type: str, body: bytes) -> int:
    if content_type == MSGPACK:
        import msgpack

        return len(msgpack.unpackb(body)["items"])
    return len(json.loads(body)["input"])


async def _client_loop(
    index: int, base_url: str, model: str, vocab: list[str], mix: Mix, start: float, end: float
) -> ClientReport:
    report = ClientReport(index)
    rng = random.Random(f"soak:{index}")
    conn = Connection(*host_port(base_url))
    try:
        while time.monotonic() < end:
            route, ctype, body = make_body(rng, vocab, mix, model)
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    answer = await conn.post(route, body, ctype, ctype)
            except Exception as exc:  # a transport failure is counted, never fatal to the soak
                report.statuses[type(exc).__name__] += 1
                report.error_sample = report.error_sample or f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(ERROR_PAUSE_S)
                continue
            report.statuses[str(answer.status)] += 1
            if answer.status == 200:
                report.ok += 1
                report.items_by_minute[int((time.monotonic() - start) // 60)] += items_in(ctype, body)
            else:
                report.error_sample = report.error_sample or f"HTTP {answer.status}: {answer.body[:200]!r}"
                await asyncio.sleep(ERROR_PAUSE_S)
    finally:
        await conn.close()
    return report


def _client(
    index: int, base_url: str, model: str, vocab: list[str], mix: Mix, start: float, end: float, results: Any
) -> None:
    try:
        report = asyncio.run(_client_loop(index, base_url, model, vocab, mix, start, end))
    except BaseException:  # the outermost edge of this process: the parent prints it
        report = ClientReport(index, crash=traceback.format_exc()[-2000:])
    results.put(report)


def _stats(samples: list[tuple[float, float]], warm_up_s: float) -> dict[str, float]:
    after = [rss for t, rss in samples if t >= warm_up_s] or [samples[-1][1]]
    start, end = after[0], after[-1]
    return {
        "rss_idle_mb": samples[0][1],
        "rss_warm_mb": start,
        "rss_end_mb": end,
        "rss_max_mb": max(rss for _, rss in samples),
        "rss_change_pct": 100.0 * (end - start) / start,
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--precision", default="float32", help="SIE_DEFAULT_COMPUTE_PRECISION of the server")
    p.add_argument("--duration", type=float, default=600.0, help="seconds of load")
    p.add_argument("--warm-up", type=float, default=60.0, help="seconds before the RSS baseline is taken")
    p.add_argument("--clients", type=int, default=8, help="client processes, one connection each")
    p.add_argument("--sample-every", type=float, default=5.0, help="seconds between RSS samples")
    p.add_argument(
        "--allocator",
        default=None,
        help="SIE_ALLOCATOR for the server (jemalloc, system, or a path to a malloc library); "
        "default: the server's own choice",
    )
    p.add_argument("--server-env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", type=Path, default=None, help="also write the result here")
    return p


def run(args: argparse.Namespace) -> dict[str, Any]:
    vocab = corpus.load_vocab(corpus.default_model_folder())
    env = dict(kv.split("=", 1) for kv in args.server_env)
    if args.allocator is not None:
        env["SIE_ALLOCATOR"] = args.allocator
    log_dir = Path(tempfile.mkdtemp(prefix="sie-soak-"))
    server = servers.start_sie(args.model, args.precision, env, log_dir)
    try:
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        start = time.monotonic() + 3.0  # spawn and import before the clock starts
        end = start + args.duration
        mix = Mix()
        clients = [
            ctx.Process(
                target=_client,
                args=(i, server.base_url, args.model, vocab, mix, start, end, results),
                daemon=True,
            )
            for i in range(args.clients)
        ]
        for proc in clients:
            proc.start()
        samples: list[tuple[float, float]] = [(0.0, server.idle_rss_mb)]
        cpu0, busy0 = procs.cpu_seconds(server.pid), procs.machine_busy_seconds()
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(args.sample_every, left))
            if server.process.exit_code() is not None:
                raise RuntimeError("server exited during the soak:\n" + server.process.log_tail())
            samples.append((time.monotonic() - start, procs.rss_mb(server.pid)))
            print(f"  t={samples[-1][0]:6.0f} s  rss={samples[-1][1]:7.1f} MB", flush=True)
        reports: list[ClientReport] = []
        deadline = time.monotonic() + REQUEST_TIMEOUT_S + 30
        while len(reports) < len(clients) and time.monotonic() < deadline:
            try:
                reports.append(results.get(timeout=1.0))
            except queue.Empty:
                continue
        server_cpu_s = procs.cpu_seconds(server.pid) - cpu0
        machine_busy_s = procs.machine_busy_seconds() - busy0
        for proc in clients:
            proc.join(timeout=5.0)
        time.sleep(2.0)
        rss_after_load = procs.rss_mb(server.pid)
    finally:
        server.stop()
    crashed = [r.crash for r in reports if r.crash]
    if crashed:
        raise RuntimeError(f"a client crashed:\n{crashed[0]}")
    statuses: Counter[str] = Counter()
    items: Counter[int] = Counter()
    for r in reports:
        statuses.update(r.statuses)
        items.update(r.items_by_minute)
    minutes = int(args.duration // 60)
    per_minute = [items[m] for m in range(max(1, minutes))]
    result: dict[str, Any] = {
        "cpu": cpu_class(),
        "command": " ".join(["python -m bench.soak", *sys.argv[1:]]),
        "allocator": args.allocator or "server default",
        "server_log": str(server.process.log_path),
        "clients": args.clients,
        "duration_s": args.duration,
        **_stats(samples, args.warm_up),
        "rss_2s_after_load_mb": rss_after_load,
        "requests_ok": sum(r.ok for r in reports),
        "items_ok": sum(items.values()),
        "items_per_s": sum(items.values()) / args.duration,
        "items_per_minute": per_minute,
        "server_cores": server_cpu_s / args.duration,
        "machine_busy_cores": machine_busy_s / args.duration,  # everything on the machine, soak included
        "errors": sum(n for s, n in statuses.items() if s != "200"),
        "statuses": dict(statuses),
        "error_sample": next((r.error_sample for r in reports if r.error_sample), ""),
        "samples": samples,
    }
    return result


def print_result(res: dict[str, Any]) -> None:
    print(f"CPU: {res['cpu']}")
    print(f"command: {res['command']}  (allocator: {res['allocator']})")
    print(
        f"RSS MB: idle {res['rss_idle_mb']:.0f}, after warm-up {res['rss_warm_mb']:.0f}, end {res['rss_end_mb']:.0f} "
        f"({res['rss_change_pct']:+.1f} %), max {res['rss_max_mb']:.0f}, 2 s after load {res['rss_2s_after_load_mb']:.0f}"
    )
    print(f"throughput: {res['items_per_s']:.1f} items/s; per minute: {res['items_per_minute']}")
    print(
        f"server kept {res['server_cores']:.2f} cores busy; the whole machine {res['machine_busy_cores']:.2f} "
        f"of {os.cpu_count()} (other work on it included)"
    )
    print(f"requests ok {res['requests_ok']}, errors {res['errors']} {res['statuses']} {res['error_sample']}")


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        res = run(args)
    finally:
        procs.stop_all()
    print_result(res)
    if args.json is not None:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
