"""Hosts for a cluster on one machine: each a Linux network namespace with its own address on one
switch, so that a fault between two of them (a partition, loss, a killed node) is a fault on a real
network path, not in a test double.

Layout (root only, `ip` from Debian's iproute2): a switch namespace holds a bridge; every host
namespace has ``eth0`` (a veth whose peer sits on the bridge) at ``10.R.S.n/24`` and its own loopback;
an observer link puts the machine itself (the test or ``scripts/chaos``) on the same switch, so it can
reach any host directly while the hosts' own faults stay theirs. Every name starts with
``c{pid}x{n}-`` (the owner's pid, then the network's number in that process: a test may hold two at
once), so ``sweep`` removes what a killed run left behind, and nothing outside those names is touched.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import psutil

SWITCH: Final = "sw"
BRIDGE: Final = "br0"
LINK: Final = "eth0"
_OWNED: Final = re.compile(r"^c(\d+)x\d+-")
_OBSERVER: Final = re.compile(r"c(\d+)x\d+o")
_NUMBERS: Final = itertools.count()


def ip(*args: str, namespace: str | None = None) -> str:
    """Run ``ip`` (inside ``namespace`` when given); its error output becomes the exception's text."""
    argv = ["ip", *(["-n", namespace] if namespace else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


@dataclass(frozen=True)
class Host:
    """One namespace "machine": where its processes run (``argv`` wraps a command to run there) and
    the address the others reach it at."""

    name: str
    namespace: str
    address: str

    def argv(self, command: list[str]) -> list[str]:
        # ``ip netns exec`` execs the command: the pid a caller gets is the program's own.
        return ["ip", "netns", "exec", self.namespace, *command]

    def run(self, *command: str) -> str:
        """A short command inside this host (``iptables``, ``tc``); fails loudly."""
        done = subprocess.run(self.argv(list(command)), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{self.name}: {' '.join(command)}: {done.stderr.strip()}")
        return done.stdout


@dataclass
class Network:
    """The switch, its hosts and the observer link; ``close`` removes all of it."""

    prefix: str = field(default_factory=lambda: f"c{os.getpid()}x{next(_NUMBERS)}")
    subnet: str = ""  # "10.R.S": chosen free at ``open``
    hosts: dict[str, Host] = field(default_factory=dict)
    observer_address: str = ""

    @property
    def switch(self) -> str:
        return f"{self.prefix}-{SWITCH}"

    @property
    def observer_link(self) -> str:
        return f"{self.prefix}o"  # in the root namespace: at most 15 characters (c + 7 + x + n + o)

    def open(self) -> None:
        sweep()
        self.subnet = _free_subnet()
        ip("netns", "add", self.switch)
        ip("link", "add", BRIDGE, "type", "bridge", namespace=self.switch)
        ip("link", "set", BRIDGE, "up", namespace=self.switch)
        ip("link", "set", "lo", "up", namespace=self.switch)
        # The observer: the root namespace's end of a veth whose other end is on the bridge.
        self.observer_address = f"{self.subnet}.254"
        ip("link", "add", self.observer_link, "type", "veth", "peer", "name", "obs", "netns", self.switch)
        self._plug("obs")
        ip("addr", "add", f"{self.observer_address}/24", "dev", self.observer_link)
        ip("link", "set", self.observer_link, "up")

    def _plug(self, port: str) -> None:
        ip("link", "set", port, "master", BRIDGE, namespace=self.switch)
        ip("link", "set", port, "up", namespace=self.switch)

    def add(self, name: str) -> Host:
        """A new host on the switch, the next address of the subnet."""
        assert self.subnet, "open() first"
        assert re.fullmatch(r"[a-z0-9]{1,8}", name), name
        namespace = f"{self.prefix}-{name}"
        address = f"{self.subnet}.{len(self.hosts) + 1}"
        ip("netns", "add", namespace)
        ip(
            "link",
            "add",
            LINK,
            "type",
            "veth",
            "peer",
            "name",
            f"p-{name}",
            "netns",
            self.switch,
            namespace=namespace,
        )
        self._plug(f"p-{name}")
        ip("addr", "add", f"{address}/24", "dev", LINK, namespace=namespace)
        ip("link", "set", LINK, "up", namespace=namespace)
        ip("link", "set", "lo", "up", namespace=namespace)
        host = Host(name, namespace, address)
        self.hosts[name] = host
        return host

    def close(self) -> None:
        for host in self.hosts.values():
            with contextlib.suppress(RuntimeError):
                ip("netns", "del", host.namespace)
        self.hosts.clear()
        with contextlib.suppress(RuntimeError):
            ip("link", "del", self.observer_link)
        with contextlib.suppress(RuntimeError):
            ip("netns", "del", self.switch)


@contextlib.contextmanager
def network() -> Iterator[Network]:
    net = Network()
    try:
        net.open()
        yield net
    finally:
        net.close()


def sweep() -> None:
    """Remove the namespaces and observer links of runs whose process is gone (a SIGKILLed test)."""
    for line in ip("netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        found = _OWNED.match(name)
        if found and not psutil.pid_exists(int(found.group(1))):
            with contextlib.suppress(RuntimeError):
                ip("netns", "del", name)
    for line in ip("-o", "link", "show").splitlines():
        link = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        found = _OBSERVER.fullmatch(link)
        if found and not psutil.pid_exists(int(found.group(1))):
            with contextlib.suppress(RuntimeError):
                ip("link", "del", link)


def _free_subnet() -> str:
    """A 10.R.S.0/24 no route of this machine covers yet (R from the pid, S counting up)."""
    taken = ip("-4", "route", "show", "table", "all") + ip("-4", "addr", "show")
    base = 200 + os.getpid() % 50
    for third in range(256):
        subnet = f"10.{base}.{third}"
        if f"{subnet}." not in taken:
            return subnet
    raise RuntimeError("no free 10.x.y.0/24 for the chaos network")


def available() -> str | None:
    """Why hosts cannot be made here (not root, no ``ip``, no namespaces), or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        probe = f"c{os.getpid()}x{next(_NUMBERS)}-probe"
        ip("netns", "add", probe)
        ip("netns", "del", probe)
    except (OSError, RuntimeError) as exc:
        return f"cannot create a network namespace: {exc}"
    return None
