"""chaos.impair on two namespace hosts of one switch, each running tests/chaos/netpeer.py (TCP and UDP
echo, a byte source); the test process is the observer on the same switch. The faults go on host
``a`` only: ``b`` is the control that shows nothing else is touched. Skipped, with the reason, where
network namespaces cannot be made (not root)."""

from __future__ import annotations

import hashlib
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from chaos import hosts
from chaos.hosts import Host
from chaos.impair import DELAY_QUEUE, delayed, impaired, lossy, partitioned
from tests.chaos.netpeer import SO_RCVBUFFORCE, pattern

PEER = Path(__file__).with_name("netpeer.py")
PORT = 7100


@dataclass(frozen=True)
class Pair:
    a: Host  # the one the faults go on
    b: Host


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    why = hosts.available()
    if why is not None:
        pytest.skip(why)
    with hosts.network() as net:
        a, b = net.add("a"), net.add("b")
        peers = [subprocess.Popen(h.argv([sys.executable, str(PEER), "serve", str(PORT)])) for h in (a, b)]
        try:
            for host in (a, b):
                _wait_listening(host.address)
            yield Pair(a, b)
        finally:
            for peer in peers:
                peer.kill()
                peer.wait()


def _wait_listening(address: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((address, PORT), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _echo_once(address: str, timeout_s: float = 2.0) -> bytes:
    with socket.create_connection((address, PORT), timeout=timeout_s) as sock:
        sock.sendall(b"ping")
        return sock.recv(16)


def _rtts(address: str, count: int = 100) -> list[float]:
    """Round trips of ``count`` small messages, one at a time, on one connection."""
    times = []
    with socket.create_connection((address, PORT), timeout=5) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(count):
            message = f"{i:08d}".encode()
            start = time.monotonic()
            sock.sendall(message)
            assert _recv_exactly(sock, len(message)) == message
            times.append(time.monotonic() - start)
    return times


def _recv_exactly(sock: socket.socket, nbytes: int) -> bytes:
    data = bytearray()
    while len(data) < nbytes:
        chunk = sock.recv(nbytes - len(data))
        assert chunk, "connection closed early"
        data += chunk
    return bytes(data)


def _netstat(host: Host, name: str) -> int:
    """One TcpExt counter of ``host``'s namespace (/proc/net/netstat is per namespace)."""
    lines = host.run("cat", "/proc/net/netstat").splitlines()
    for header, values in zip(lines[::2], lines[1::2], strict=True):
        if header.startswith("TcpExt:"):
            return int(dict(zip(header.split(), values.split(), strict=True))[name])
    raise AssertionError("no TcpExt in /proc/net/netstat")


def _queue_stats(host: Host) -> dict[str, int]:
    """The kernel's line for ``host``'s delay queue in /proc/net/netfilter/nfnetlink_queue."""
    for line in host.run("cat", "/proc/net/netfilter/nfnetlink_queue").splitlines():
        fields = [int(f) for f in line.split()]
        if fields[0] == DELAY_QUEUE:
            names = [
                "queue",
                "portid",
                "waiting",
                "mode",
                "range",
                "queue_dropped",
                "user_dropped",
                "last_id",
            ]
            return dict(zip(names, fields, strict=False))
    raise AssertionError("the delay queue is not bound")


def test_a_partition_is_silent_and_heals(pair: Pair) -> None:
    open_before = socket.create_connection((pair.a.address, PORT), timeout=5)
    with open_before:
        with partitioned(pair.a):
            # Silence, not a refusal: the SYN is dropped, so the connect times out.
            with pytest.raises(TimeoutError):
                _echo_once(pair.a.address, timeout_s=1.0)
            # What was sent on a connection opened before gets no answer while partitioned...
            open_before.settimeout(1.0)
            open_before.sendall(b"held")
            with pytest.raises(TimeoutError):
                open_before.recv(16)
            assert _echo_once(pair.b.address) == b"ping", "the other host is reachable"
        # ...and arrives once healed: TCP retransmits it (the connection was never reset).
        open_before.settimeout(10.0)
        assert _recv_exactly(open_before, 4) == b"held"
    assert _echo_once(pair.a.address) == b"ping"
    assert "sie-chaos" not in pair.a.run("iptables-save"), "the partition's rules are gone"


def test_delay_adds_its_time_to_each_round_trip_of_that_host_only(pair: Pair) -> None:
    before = statistics.median(_rtts(pair.a.address))
    with delayed(pair.a, 0.05):
        during = statistics.median(_rtts(pair.a.address))
        other = statistics.median(_rtts(pair.b.address, count=20))
    after = statistics.median(_rtts(pair.a.address, count=20))
    assert before < 0.02 and after < 0.02 and other < 0.02, (before, after, other)
    assert during >= 0.045, during  # one direction (into a) delayed: 50 ms per round trip
    assert "sie-chaos" not in pair.a.run("iptables-save"), "the delay's rule is gone"


def test_delay_keeps_order_and_all_packets_at_thousands_per_second(pair: Pair) -> None:
    """A bulk stream into the delayed host through its delay queue: every packet is held by the
    delayer (none dropped by the kernel's queue), none arrives out of order, and the bytes are the
    sent ones."""
    nbytes = 8 << 20  # about 5,800 full-size segments
    out_of_order = _netstat(pair.a, "TCPOFOQueue")
    with delayed(pair.a, 0.05):
        pulled = pair.a.run(sys.executable, str(PEER), "pull", pair.b.address, str(PORT), str(nbytes))
        queue = _queue_stats(pair.a)
    assert json.loads(pulled) == {"bytes": nbytes, "sha256": hashlib.sha256(pattern(nbytes)).hexdigest()}
    assert queue["queue_dropped"] == 0 and queue["user_dropped"] == 0, queue
    assert queue["last_id"] >= nbytes // 1448, queue  # each segment went through the queue
    assert _netstat(pair.a, "TCPOFOQueue") == out_of_order, "segments arrived out of order"


def test_loss_drops_its_share_each_way_and_tcp_carries_everything(pair: Pair) -> None:
    """4,000 UDP datagrams to a's echo: the kernel's counters show about 5 % dropped each way, and
    they account for exactly what came back; a TCP echo of 4 MiB over the same loss (a few hundred
    packets, GSO aggregates each way) loses some of them and still comes back whole."""
    datagrams = 4000
    with lossy(pair.a, 0.05) as loss:
        received = _udp_round(pair.a.address, datagrams)
        counts = loss.counts()
        blob = pattern(4 << 20)
        assert _tcp_echo(pair.a.address, blob) == blob
        after_tcp = loss.counts()
    into, out = counts["in"], counts["out"]
    assert into.seen == datagrams, counts
    assert out.seen == into.seen - into.dropped, "a echoed each datagram that got in"
    assert received == out.seen - out.dropped, (received, counts)
    for direction in (into, out):
        assert 0.02 <= direction.share <= 0.09, counts
    tcp_dropped = after_tcp["in"].dropped - into.dropped + after_tcp["out"].dropped - out.dropped
    assert tcp_dropped > 0, after_tcp  # the echo came back whole through retransmits
    assert "sie-chaos" not in pair.a.run("iptables-save"), "the loss rules are gone"


def test_impaired_is_loss_and_delay_together(pair: Pair) -> None:
    with impaired(pair.a, loss=0.05, delay_s=0.05) as loss:
        rtt = statistics.median(_rtts(pair.a.address, count=40))
        counts = loss.counts()
    assert rtt >= 0.045, rtt
    assert counts["in"].seen > 0 and counts["out"].seen > 0, counts
    assert "sie-chaos" not in pair.a.run("iptables-save")


def _udp_round(address: str, count: int) -> int:
    """Sends ``count`` datagrams (paced in bursts the receive buffers hold) and counts the echoes."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
        sock.connect((address, PORT))
        for i in range(count):
            sock.send(i.to_bytes(4, "big"))
            if i % 200 == 199:
                time.sleep(0.005)
        seen: set[int] = set()
        sock.settimeout(1.0)
        try:
            while True:
                seen.add(int.from_bytes(sock.recv(16), "big"))
        except TimeoutError:
            pass
    return len(seen)


def _tcp_echo(address: str, blob: bytes) -> bytes:
    with socket.create_connection((address, PORT), timeout=20) as sock:
        writer = threading.Thread(target=sock.sendall, args=(blob,))
        writer.start()
        data = _recv_exactly(sock, len(blob))
        writer.join()
    return data
