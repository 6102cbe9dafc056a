"""The delay queue of ``chaos.impair.delayed``: a process inside one host's network namespace that
holds every packet the host's NFQUEUE rule hands it for ``delay_s`` and then lets it go on.

It exists because this project's machines (Firecracker VMs) have no ``sch_netem``: ``tc qdisc ...
netem delay`` is refused there, while the NFQUEUE target and ``libnetfilter_queue`` are available.
The kernel parks each queued packet until a verdict names it; this process only gives ACCEPT
verdicts, each ``delay_s`` after the packet was queued, in the order the packets came, so the stream
keeps its order and every packet is late by the same amount (plus this loop's few tens of
microseconds). Only packet metadata is copied out of the kernel (``COPY_META``), not payloads.

Run as a script (``python chaos/delayer.py QUEUE DELAY_S``, needs no import of the project): it
binds the queue, prints ``ready`` on stdout (the caller installs its rule only then), and on SIGTERM
lets out what it holds at its due time and exits. It also exits when its parent is gone, so a
SIGKILLed run leaves no process holding a namespace's packets.
"""

from __future__ import annotations

import collections
import os
import select
import signal
import sys
import time
from types import FrameType

from netfilterqueue import COPY_META, NetfilterQueue, Packet

MAX_HELD = 65_536  # the kernel's queue length for this queue: far above rate * delay of a test or run
TICK_S = 0.05  # the longest wait without a due packet: how soon a stop or a dead parent is seen


def serve(queue_num: int, delay_s: float) -> None:
    parent = os.getppid()
    held: collections.deque[tuple[float, Packet]] = collections.deque()
    stopping = False

    def on_packet(packet: Packet) -> None:
        held.append((time.monotonic() + delay_s, packet))

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    queue = NetfilterQueue()
    queue.bind(queue_num, on_packet, max_len=MAX_HELD, mode=COPY_META)
    fd = queue.get_fd()
    print("ready", flush=True)
    try:
        while True:
            now = time.monotonic()
            while held and held[0][0] <= now:
                held.popleft()[1].accept()
            if os.getppid() != parent:
                return  # the owner is gone: unbinding lets the kernel drop what is still queued
            if stopping and not held:
                queue.run(block=False)  # packets queued before the rule went
                if not held:
                    return
            wait_s = min(TICK_S, held[0][0] - now) if held else TICK_S
            readable, _, _ = select.select([fd], [], [], max(0.0, wait_s))
            if readable:
                queue.run(block=False)
    finally:
        queue.unbind()


if __name__ == "__main__":
    serve(int(sys.argv[1]), float(sys.argv[2]))
