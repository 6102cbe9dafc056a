"""The far end of tests/chaos/test_impair.py, run inside a host's namespace (``python netpeer.py``):

* ``serve PORT``: a TCP echo on PORT, a UDP echo on PORT, and on PORT + 1 a source that reads an
  8-byte big-endian length and sends that many bytes of ``pattern`` (then closes).
* ``pull ADDRESS PORT NBYTES``: asks ADDRESS's source for NBYTES and prints, as JSON, how many bytes
  came and their SHA-256.

A UDP echo send refused locally (EPERM under an OUTPUT drop) is skipped: the datagram is lost, which
is what the test counts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import socketserver
import struct
import sys
import threading

CHUNK = 64 * 1024
SO_RCVBUFFORCE = 33  # Linux's, which the socket module does not name: a buffer past rmem_max (root)


def pattern(nbytes: int) -> bytes:
    """Bytes that differ from a shifted copy of themselves: a reordered or lost byte changes the hash."""
    block = bytes(range(251))  # a prime period: no power-of-two chunking lines up with it
    return (block * (nbytes // len(block) + 1))[:nbytes]


class _Echo(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := self.connection.recv(CHUNK):
            self.connection.sendall(data)


class _Source(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        (nbytes,) = struct.unpack(">Q", self.rfile.read(8))
        self.connection.sendall(pattern(nbytes))


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def _udp_echo(port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
    sock.bind(("0.0.0.0", port))
    while True:
        data, peer = sock.recvfrom(2048)
        with contextlib.suppress(PermissionError):
            sock.sendto(data, peer)


def serve(port: int) -> None:
    threading.Thread(target=_udp_echo, args=(port,), daemon=True).start()
    source = _Server(("0.0.0.0", port + 1), _Source)
    threading.Thread(target=source.serve_forever, daemon=True).start()
    _Server(("0.0.0.0", port), _Echo).serve_forever()


def pull(address: str, port: int, nbytes: int) -> None:
    digest = hashlib.sha256()
    got = 0
    with socket.create_connection((address, port + 1), timeout=60) as sock:
        sock.sendall(struct.pack(">Q", nbytes))
        while data := sock.recv(CHUNK):
            digest.update(data)
            got += len(data)
    print(json.dumps({"bytes": got, "sha256": digest.hexdigest()}))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        pull(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
