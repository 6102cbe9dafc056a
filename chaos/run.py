"""A chaos run: steady load from the client host while faults come and go, then the invariant checked
request by request and the cluster checked for leftovers.

``Harness`` owns what a run needs beside the topology: the expected answers (from the standalone
server, on the same models, before any fault), the load client's process, the timeline of faults and
an RSS sampler. ``run`` injects the faults in turn under one load and returns the report
(chaos.report); a test runs one fault, ``scripts/chaos`` all of them for as long as it is told.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench.procs import ManagedProcess, free_port, rss_mb, wait_ready
from chaos import corpus
from chaos.faults import Fault
from chaos.report import Report, Window, work_left
from chaos.topology import SERVED, Service, Topology, base_env, script

LOAD_CLIENT: Final = Path(__file__).with_name("load_client.py")
DRAIN_S: Final = 60.0
RSS_EVERY_S: Final = 5.0


@dataclass
class Harness:
    top: Topology
    public_python: Path
    concurrency: int = 4
    templates: list[dict[str, Any]] = field(default_factory=corpus.templates)
    expected_path: Path | None = None
    rss: dict[str, list[tuple[float, int, float]]] = field(default_factory=dict)  # name -> (t, pid, MB)

    @property
    def folder(self) -> Path:
        return self.top.root / "load"

    def expect(self) -> None:
        """The standalone server's answer to every template: what every answer through the cluster must
        equal. It runs on this machine's loopback, on the topology's models, and stops after."""
        self.folder.mkdir(parents=True, exist_ok=True)
        assert self.top.models_dir is not None
        port = free_port()
        env = base_env() | {
            "SIE_MODELS_DIR": str(self.top.models_dir),
            "SIE_DEFAULT_COMPUTE_PRECISION": "float32",
        }
        argv = [
            script("sie-server"),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--preload",
            ",".join(SERVED),
        ]
        server = ManagedProcess("standalone", argv, env, self.folder / "standalone.log")
        server.start()
        try:
            wait_ready(server, lambda c: c.get(f"http://127.0.0.1:{port}/readyz").status_code == 200, 180)
            plan = self._plan(expect_url=f"http://127.0.0.1:{port}")
            self.expected_path = self.folder / "expected.json"
            done = ManagedProcess(
                "expect",
                [str(self.public_python), str(LOAD_CLIENT), "expect", str(plan), str(self.expected_path)],
                base_env(),
                self.folder / "expect.log",
            )
            done.start()
            deadline = time.monotonic() + 300
            while done.exit_code() is None:
                assert time.monotonic() < deadline, "expected answers not computed in 300 s"
                time.sleep(0.2)
            if done.exit_code() != 0:
                raise RuntimeError(f"the expect run failed:\n{done.log_tail(40)}")
        finally:
            server.stop()

    def _plan(self, **extra: Any) -> Path:
        plan = {
            "templates": self.templates,
            "gateways": [gateway.url for gateway in self.top.gateways],
            "concurrency": self.concurrency,
            "duration_s": 24 * 3600,
            "timeout_s": 60,
            **extra,
        }
        path = self.folder / f"plan-{time.monotonic_ns()}.json"
        path.write_text(json.dumps(plan))
        return path

    @contextlib.contextmanager
    def load(self, name: str) -> Iterator[Path]:
        """The load client on the client host for the ``with`` block; yields its records' file. On exit
        it is told to stop, and every request it had started ends (answered or given up) first."""
        assert self.expected_path is not None and self.top.client is not None
        stop = self.folder / f"{name}.stop"
        records = self.folder / f"{name}.jsonl"
        plan = self._plan(stop_file=str(stop))
        argv = self.top.client.argv(
            [
                str(self.public_python),
                str(LOAD_CLIENT),
                "load",
                str(plan),
                str(self.expected_path),
                str(records),
            ]
        )
        client = ManagedProcess(f"load {name}", argv, base_env(), self.folder / f"{name}.log")
        client.start()
        try:
            _wait_answering(client, records)
            yield records
        finally:
            stop.touch()
            deadline = time.monotonic() + 180
            while client.exit_code() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            client.stop(grace_s=5)
        if client.exit_code() not in (0, None):
            raise RuntimeError(f"the load client failed:\n{client.log_tail(40)}")

    @contextlib.contextmanager
    def sampling_rss(self) -> Iterator[None]:
        """Every process's RSS every few seconds, by name and pid (a restarted one is a new series)."""
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(RSS_EVERY_S):
                now = time.time()
                for name, pid, mb in self.processes():
                    self.rss.setdefault(name, []).append((now, pid, mb))

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def processes(self) -> list[tuple[str, int, float]]:
        found: list[tuple[str, int, float]] = []
        services: list[Service] = self.top.services
        for service in services:
            if service.alive():
                with contextlib.suppress(Exception):
                    found.append((service.name, service.pid, service.rss_mb()))
        assert self.top.nats is not None
        for node in self.top.nats.nodes:
            if node.process is not None and node.process.exit_code() is None:
                with contextlib.suppress(Exception):
                    found.append((node.name, node.pid, rss_mb(node.pid)))
        return found

    def run(
        self,
        name: str,
        faults: list[tuple[str, Fault]],
        hold_s: float,
        baseline_s: float,
        settle_s: float,
        minutes: float = 0.0,
    ) -> Report:
        """One load across ``faults`` in turn: ``baseline_s`` of calm first, each fault held
        ``hold_s``, healed, then ``settle_s`` of calm before the next; round again until ``minutes``
        have passed (one round at least). The report holds one window per fault injected."""
        windows: list[Window] = []
        until = time.time() + 60 * minutes
        with self.load(name) as records:
            time.sleep(baseline_s)
            calm = Window("baseline", time.time() - baseline_s, 0.0, 0.0)
            for fault_name, fault in _rounds(faults, until):
                started = time.time()
                injected, broken = started, None
                try:
                    with fault(self.top) as recovery:
                        injected = time.time()
                        time.sleep(hold_s)
                except (
                    AssertionError,
                    RuntimeError,
                ) as exc:  # its own check failed: reported, the run goes on
                    recovery, broken = None, f"{type(exc).__name__}: {exc}"
                healed = time.time()
                time.sleep(settle_s)
                window = Window(fault_name, started, injected - started, healed - started, recovery)
                window.broken = broken
                windows.append(window)
            ended = time.time()
        calm.end = windows[0].start if windows else ended
        for window, following in zip(windows, [*windows[1:], None], strict=True):
            window.end = following.start if following is not None else ended
        report = Report.read(records, [calm, *windows])
        report.leftovers = self.leftovers()
        report.rss = self.rss
        return report

    def leftovers(self) -> dict[str, Any]:
        """What the cluster still holds once the load has ended: work in streams, unacked deliveries,
        dead letters. Waits (up to ``DRAIN_S``) for work a late redelivery is still finishing."""
        assert self.top.nats is not None
        nats = self.top.nats

        async def state() -> dict[str, Any]:
            client = await nats.connect()
            try:
                js = client.jetstream()
                found: dict[str, Any] = {}
                for info in await js.streams_info():
                    name = info.config.name or ""
                    found[name] = {"messages": info.state.messages, "replicas": info.config.num_replicas}
                    if name.startswith("WORK_POOL_"):
                        for consumer in await js.consumers_info(name):
                            found[name][consumer.name] = {
                                "pending": consumer.num_pending,
                                "ack_pending": consumer.num_ack_pending,
                            }
                return found
            finally:
                await client.close()

        deadline = time.monotonic() + DRAIN_S
        while True:
            with contextlib.suppress(Exception):
                found = asyncio.run(state())
                if not work_left(found) or time.monotonic() > deadline:
                    return found
            if time.monotonic() > deadline:
                return {"error": "NATS did not answer"}
            time.sleep(1)


def _wait_answering(client: ManagedProcess, records: Path, timeout_s: float = 180) -> None:
    """Until the load client has had its first answer: the calm before a fault is measured from a
    client that is already sending, not from one still importing its SDK."""
    deadline = time.monotonic() + timeout_s
    while not (records.exists() and records.stat().st_size):
        if client.exit_code() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the load client never answered:\n{client.log_tail(40)}")
        time.sleep(0.2)


def _rounds(faults: list[tuple[str, Fault]], until: float) -> Iterator[tuple[str, Fault]]:
    yield from faults
    while faults and time.time() < until:
        for fault in faults:
            if time.time() >= until:
                return
            yield fault
