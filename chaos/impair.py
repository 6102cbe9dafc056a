"""Network faults on one host of ``chaos.hosts``: a partition, random loss, added delay, each a context
manager that puts the fault on the host's ``eth0`` on entry and takes it off on exit.

Everything acts inside the host's own network namespace (its netfilter tables, its NFQUEUE), so only
that host's traffic is hit, in both directions for drops, and every other host's link stays clean:

* ``partitioned``: iptables DROP of every packet in (INPUT) and out (OUTPUT) of ``eth0``. The peers
  see silence, as across a real partition, not a link going down: TCP connects time out, open
  connections stall and retransmit. (A UDP send from the partitioned host itself is refused with
  EPERM by the OUTPUT drop; the cluster speaks only TCP.)
* ``lossy``: iptables ``-m statistic --mode random --probability LOSS -j DROP`` in both directions,
  the kernel's own random drop of each packet; a counting rule before each drop rule gives the
  packets seen, so ``Loss.counts`` says what share was dropped. As with netem, a packet is what the
  stack hands over: a TCP sender's GSO aggregate (up to 64 KiB) is one to the rule and is lost
  whole, while a small message (most of the cluster's) is one packet on the wire too.
* ``delayed``: ``tc qdisc ... netem delay`` is what one would use, but this project's machines
  (Firecracker VMs) have no ``sch_netem``. Every packet arriving on ``eth0`` goes to an NFQUEUE
  instead, where ``chaos/delayer.py`` (a process in the same namespace, NetfilterQueue over
  ``libnetfilter_queue``) holds it ``delay_s`` and accepts it, in order: each round trip with the
  host is ``delay_s`` longer. The incoming side is the one held because a packet held on its way out
  still belongs to its sending socket, whose TCP small-queue budget (about a millisecond of data)
  then stalls a bulk sender for the whole delay: 2 MiB between two hosts took 30 s held outbound,
  0.55 s held inbound (netem orphans what it holds; a queue verdict cannot). The rule has
  ``--queue-bypass``: should the delayer die, packets pass undelayed rather than vanish, and the exit
  of ``delayed`` raises with its log.
* ``impaired``: loss and delay together (the issue's "5 % loss and 50 ms delay on worker links").

Drop rules are inserted first in their chain and the queue rule appended after them, so a lost
packet is never queued and a partition wins over everything. Rules carry a ``sie-chaos-…`` comment;
a killed run's rules go with its namespaces (``chaos.hosts.sweep``).
"""

from __future__ import annotations

import contextlib
import re
import select
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from chaos.hosts import LINK, Host

DELAYER: Final = Path(__file__).with_name("delayer.py")
DELAY_QUEUE: Final = 0  # NFQUEUE numbers are per namespace: one delay queue per host
READY_S: Final = 10.0
STOP_S: Final = 10.0
# (chain, the interface match of that chain's direction)
_DIRECTIONS: Final = (("INPUT", "-i"), ("OUTPUT", "-o"))
_COUNTED: Final = re.compile(r"^\[(\d+):(\d+)\] -A (\w+) .*--comment (sie-chaos-\S+)")


def _rule(chain: str, flag: str, comment: str, *match: str) -> list[str]:
    return [chain, flag, LINK, *match, "-m", "comment", "--comment", comment]


@contextlib.contextmanager
def _rules(host: Host, rules: list[tuple[str, list[str]]]) -> Iterator[None]:
    """``rules`` as (``-I`` or ``-A``, rule) put in place in order, deleted in reverse on exit."""
    placed: list[list[str]] = []
    try:
        for verb, rule in rules:
            host.run("iptables", "-w", verb, *rule)
            placed.append(rule)
        yield
    finally:
        for rule in reversed(placed):
            host.run("iptables", "-w", "-D", *rule)


@contextlib.contextmanager
def partitioned(host: Host) -> Iterator[None]:
    """Every packet to and from ``host`` dropped until exit."""
    rules = [
        ("-I", [*_rule(chain, flag, "sie-chaos-partition"), "-j", "DROP"]) for chain, flag in _DIRECTIONS
    ]
    with _rules(host, rules):
        yield


@dataclass(frozen=True)
class LossCount:
    """Packets that reached the loss rule of one direction, and how many of them it dropped."""

    seen: int
    dropped: int

    @property
    def share(self) -> float:
        return self.dropped / self.seen if self.seen else 0.0


@dataclass(frozen=True)
class Loss:
    host: Host
    loss: float

    def counts(self) -> dict[str, LossCount]:
        """The kernel's counters since entry, per direction ("in" for INPUT, "out" for OUTPUT)."""
        packets: dict[tuple[str, str], int] = {}
        for line in self.host.run("iptables-save", "-c", "-t", "filter").splitlines():
            found = _COUNTED.match(line)
            if found:
                packets[(found.group(3), found.group(4))] = int(found.group(1))
        return {
            name: LossCount(
                packets.get((chain, "sie-chaos-loss-seen"), 0), packets.get((chain, "sie-chaos-loss-drop"), 0)
            )
            for name, chain in (("in", "INPUT"), ("out", "OUTPUT"))
        }


@contextlib.contextmanager
def lossy(host: Host, loss: float = 0.05) -> Iterator[Loss]:
    """Each packet to and from ``host`` dropped at random with probability ``loss`` until exit."""
    if not 0.0 < loss < 1.0:
        raise ValueError(f"loss is a probability in (0, 1), not {loss}")
    rules: list[tuple[str, list[str]]] = []
    for chain, flag in _DIRECTIONS:
        drop = _rule(chain, flag, "sie-chaos-loss-drop", "-m", "statistic", "--mode", "random")
        # The counter goes in after the drop rule, in front of it: it sees every packet the drop does.
        rules.append(("-I", [*drop, "--probability", f"{loss:.6f}", "-j", "DROP"]))
        rules.append(("-I", _rule(chain, flag, "sie-chaos-loss-seen")))
    with _rules(host, rules):
        yield Loss(host, loss)


@contextlib.contextmanager
def delayed(host: Host, delay_s: float = 0.05) -> Iterator[None]:
    """Every packet arriving at ``host`` held ``delay_s`` before its delivery, until exit."""
    if not 0.0 < delay_s <= 10.0:
        raise ValueError(f"delay_s is in (0, 10] seconds, not {delay_s}")
    with tempfile.TemporaryFile() as log:
        delayer = subprocess.Popen(
            host.argv([sys.executable, str(DELAYER), str(DELAY_QUEUE), repr(delay_s)]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        try:
            _wait_ready(delayer, log)
            rule = ["INPUT", "-i", LINK, "-m", "comment", "--comment", "sie-chaos-delay"]
            queue = ["-j", "NFQUEUE", "--queue-num", str(DELAY_QUEUE), "--queue-bypass"]
            with _rules(host, [("-A", rule + queue)]):
                yield
                if delayer.poll() is not None:
                    raise RuntimeError(f"{host.name}: the delayer died during the delay:\n{_text(log)}")
        finally:
            delayer.terminate()  # after the rule is gone: it lets out what it holds, then exits
            try:
                delayer.wait(STOP_S)
            except subprocess.TimeoutExpired:
                delayer.kill()
                delayer.wait()
            assert delayer.stdout is not None
            delayer.stdout.close()


def _wait_ready(delayer: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    assert delayer.stdout is not None
    readable, _, _ = select.select([delayer.stdout], [], [], READY_S)
    line = delayer.stdout.readline() if readable else b""
    if line.strip() != b"ready":
        delayer.kill()
        delayer.wait()
        raise RuntimeError(f"the delayer did not start:\n{_text(log)}")


def _text(log: IO[bytes]) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-4000:]


@contextlib.contextmanager
def impaired(host: Host, loss: float = 0.05, delay_s: float = 0.05) -> Iterator[Loss]:
    """Random loss both ways and delay out of ``host`` at once; yields the loss counters."""
    with lossy(host, loss) as counters, delayed(host, delay_s):
        yield counters
