"""``bench.procs.cpu_seconds``: the host-path bench's CPU per request rests on it."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from bench.procs import cpu_seconds

# Two threads spin for 0.4 s each and end, then the process sleeps until it is killed.
SPIN = """
import threading, time
def spin():
    end = time.thread_time() + 0.4
    while time.thread_time() < end:
        pass
threads = [threading.Thread(target=spin) for _ in range(2)]
for t in threads: t.start()
for t in threads: t.join()
print("done", flush=True)
time.sleep(60)
"""


def test_every_thread_is_counted_the_ended_ones_too_and_agrees_with_the_ticks() -> None:
    child = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "done"
        spent = cpu_seconds(child.pid)
        ticks = psutil.Process(child.pid).cpu_times()
        # Both spinning threads (0.8 s) and the interpreter's start-up, within the ticks' resolution.
        assert spent >= 0.8
        assert abs(spent - (ticks.user + ticks.system)) < 0.05
        time.sleep(0.2)  # asleep: nothing more is counted
        assert cpu_seconds(child.pid) - spent < 0.01
    finally:
        child.kill()
        child.wait()


# Spins 3 ms of its own CPU when told to, between two waits on its pipes.
SPIN_3MS = """
import sys, time
print("ready", flush=True)
sys.stdin.readline()
end = time.thread_time() + 0.003
while time.thread_time() < end:
    pass
print("done", flush=True)
sys.stdin.readline()
"""


def test_a_few_milliseconds_are_resolved() -> None:
    """Clock ticks (10 ms) would read a 3 ms spin as 0 or 10 ms. Measured on a child of its own: this
    process's count includes its descendants, which in the whole suite are busy servers."""
    child = subprocess.Popen(
        [sys.executable, "-c", SPIN_3MS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        before = cpu_seconds(child.pid)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        spent = cpu_seconds(child.pid) - before
    finally:
        child.kill()
        child.wait()
    assert 0.003 <= spent < 0.008, spent
