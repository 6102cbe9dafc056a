"""``python -m bench.cluster`` (``scripts/bench-cluster``): the queue path's cost, measured.

One run starts, on the same cores, the standalone server and a one-worker cluster (``nats-server``
with JetStream, ``sie-server serve`` with ``SIE_NATS_URL``, ``sie-gateway``), the same model and
precision in both, and puts the same load through each with our SDK (msgpack): requests of 32 items
(throughput) and of 1 item at concurrency 1 (latency). Both stay up and are measured in alternating
rounds (standalone, cluster, standalone, ...), so drift of the machine hits both; the medians of the
rounds give the ratio of items/s (cluster over standalone) and the p50/p99 the queue adds to a
1-item request. Both answer before any timing: the vectors through the cluster equal the
standalone server's (cosine >= 0.9999: bfloat16 moves a text's vector by ~1e-5 with its batch).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import corpus, procs, servers
from bench.clients import SdkSender
from bench.load import Budget, run_cell
from bench.stats import CellResult, CellSpec

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@dataclass
class Target:
    name: str
    url: str
    pid: int  # the process whose CPU the cell reports (the model's)


def start_nats(log_dir: Path) -> tuple[procs.ManagedProcess, str]:
    """``nats-server`` with JetStream on a file store under ``log_dir``; returns it and its URL."""
    port = procs.free_port()
    nats_bin = Path(sys.executable).with_name("nats-server")
    nats = procs.ManagedProcess(
        "nats-server",
        [str(nats_bin), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(log_dir / "jetstream")],
        {},
        log_dir / "nats.log",
    )
    nats.start()
    return nats, f"nats://127.0.0.1:{port}"


def start_gateway(
    nats_url: str, log_dir: Path, ready: Callable[[dict[str, Any]], bool], extra: dict[str, str] | None = None
) -> tuple[procs.ManagedProcess, str]:
    """``sie-gateway serve`` on a free port; returns once ``ready`` says yes to its ``/health``."""
    port = procs.free_port()
    gateway = procs.ManagedProcess(
        "sie-gateway",
        [
            sys.executable,
            "-c",
            "from sie.gateway.cli import main; main()",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        {**servers.offline_env({"SIE_NATS_URL": nats_url, **(extra or {})})},
        log_dir / "gateway.log",
    )
    gateway.start()
    base = f"http://127.0.0.1:{port}"
    procs.wait_ready(gateway, lambda client: ready(client.get(f"{base}/health").json()), 120)
    return gateway, base


def serves(model: str, workers: int = 1) -> Callable[[dict[str, Any]], bool]:
    """A gateway ``/health`` predicate: at least ``workers`` healthy workers have ``model`` loaded."""

    def check(health: dict[str, Any]) -> bool:
        loaded = [w for w in health.get("workers", []) if w.get("healthy") and model in w["loaded_models"]]
        return len(loaded) >= workers

    return check


def _start_cluster(
    model: str, precision: str, log_dir: Path, extra: dict[str, str]
) -> tuple[Target, list[procs.ManagedProcess]]:
    nats, url = start_nats(log_dir)
    worker = servers.start_sie(
        model,
        precision,
        {"SIE_NATS_URL": url, "SIE_WORKER_ID": "bench-worker", "SIE_WORKER_METRICS_PORT": "0", **extra},
        log_dir,
        log_name="worker.log",
    )
    gateway, base = start_gateway(url, log_dir, serves(model))
    return Target("cluster", base, worker.pid), [gateway, worker.process, nats]


async def _vectors(url: str, model: str, texts: list[str]) -> np.ndarray:
    sender = SdkSender(url, model, 4)
    try:
        return await sender.vectors(texts)
    finally:
        await sender.aclose()


async def _measure(
    target: Target, model: str, spec: CellSpec, texts: list[str], tokens: list[int], budget: Budget
) -> CellResult:
    sender = SdkSender(target.url, model, spec.concurrency + 4)
    try:
        return await run_cell(target.name, target.pid, sender, spec, texts, tokens, budget)
    finally:
        await sender.aclose()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--precision", default="bfloat16", help="SIE_DEFAULT_COMPUTE_PRECISION of both")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--items", type=int, default=1024, help="items per 32-item cell and round")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight in the 32-item cell")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: the server's auto)")
    p.add_argument(
        "--worker-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="more environment for the worker",
    )
    args = p.parse_args(argv)
    extra = {"SIE_DEVICE": args.device} if args.device else {}
    log_dir = Path(tempfile.mkdtemp(prefix="sie-bench-cluster-"))
    data = corpus.build_corpus(corpus.default_model_folder())
    started = time.monotonic()
    running: list[procs.ManagedProcess] = []
    try:
        standalone = servers.start_sie(args.model, args.precision, extra, log_dir, log_name="standalone.log")
        running.append(standalone.process)
        alone = Target("standalone", standalone.base_url, standalone.pid)
        worker_extra = dict(item.split("=", 1) for item in args.worker_env)
        cluster, parts = _start_cluster(args.model, args.precision, log_dir, {**extra, **worker_extra})
        running += parts
        sample = [data.texts[i] for i in data.check_sample]
        a = asyncio.run(_vectors(alone.url, args.model, sample))
        b = asyncio.run(_vectors(cluster.url, args.model, sample))
        cosines = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        print(f"correctness: min cosine cluster vs standalone {cosines.min():.7f} over {len(sample)} texts")
        if cosines.min() < 0.9999:  # bf16: the same text batched with other texts moves ~1e-5
            print("CORRECTNESS CHECK FAILED")
            return 1
        cells = [
            (CellSpec("sdk", args.concurrency, 32), Budget(items=args.items)),
            (CellSpec("sdk", 1, 1), Budget(items=4 * 200)),  # 200 single-item requests
        ]
        results: dict[tuple[str, str], list[CellResult]] = {}
        for round_ in range(args.rounds):
            for spec, budget in cells:
                for target in (alone, cluster):
                    cell = asyncio.run(
                        _measure(target, args.model, spec, data.texts, data.text_tokens, budget)
                    )
                    results.setdefault((target.name, spec.key), []).append(cell)
                    print(
                        f"round {round_ + 1} {target.name:10s} {spec.key:12s} {cell.items / cell.elapsed_s:8.1f} items/s"
                        f"  p50 {cell.p50_ms:7.2f} ms  p99 {cell.p99_ms:7.2f} ms  errors {cell.errors}"
                    )
        print("\n== cluster mode (median of rounds) ==\n")
        print(
            "| cell | standalone items/s | cluster items/s | ratio | standalone p50/p99 ms | cluster p50/p99 ms | added p50/p99 ms |"
        )
        print("|---|---|---|---|---|---|---|")
        for spec, _ in cells:
            s, c = results[("standalone", spec.key)], results[("cluster", spec.key)]
            rate_s = statistics.median(x.items / x.elapsed_s for x in s)
            rate_c = statistics.median(x.items / x.elapsed_s for x in c)
            p50_s, p99_s = statistics.median(x.p50_ms for x in s), statistics.median(x.p99_ms for x in s)
            p50_c, p99_c = statistics.median(x.p50_ms for x in c), statistics.median(x.p99_ms for x in c)
            print(
                f"| {spec.key} | {rate_s:.1f} | {rate_c:.1f} | {rate_c / rate_s:.3f}x | {p50_s:.2f} / {p99_s:.2f} "
                f"| {p50_c:.2f} / {p99_c:.2f} | {p50_c - p50_s:+.2f} / {p99_c - p99_s:+.2f} |"
            )
        print(f"\nrun took {time.monotonic() - started:.0f} s; logs in {log_dir}")
        return 0
    finally:
        for process in reversed(running):
            process.stop()
        procs.stop_all()


if __name__ == "__main__":
    sys.exit(main())
