"""The process heap around model lifetimes: keep the garbage collector off the weights, give memory back.

A loaded transformers model is some 400,000 Python objects (modules, parameters, config, tokenizer
tables). Under load, request objects that outlive a queue wait get promoted to the oldest generation,
and every few seconds CPython runs a full collection that walks all of them: 230 ms with the GIL held
for all-MiniLM-L6-v2, during which the forward thread cannot dispatch its next operator.
``gc.freeze()`` after a load moves the model's objects to the permanent generation, which collections
skip, so they cost what the request objects cost. Frozen objects are still freed by reference count;
only reference cycles among them wait for ``collect_unloaded``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import Final

# How often a busy server trims (see ``PeriodicTrim``): rare enough that re-faulting the pages it
# returned costs well under 1 % of the device's time, often enough that glibc's kept pages stay
# bounded by what a few seconds of batches leave behind.
BUSY_TRIM_EVERY_S: Final = 10.0


def freeze_loaded() -> None:
    """After a model load: collect the load's garbage, then exempt everything alive from collections."""
    gc.collect()
    gc.freeze()


# Set inside ``one_collection``: the unloads noted there, collected once at its end.
_DEFERRED: ContextVar[list[None] | None] = ContextVar("sie_heap_deferred_unloads", default=None)


def collect_unloaded() -> None:
    """After a model is closed: its objects may sit in the permanent generation in cycles."""
    deferred = _DEFERRED.get()
    if deferred is not None:
        deferred.append(None)
        return
    gc.unfreeze()
    gc.collect()
    gc.freeze()


@contextmanager
def one_collection() -> Iterator[None]:
    """Closing several models (a process stopping): one ``collect_unloaded`` at the end, not one per
    model. Each walks the whole heap, every model's objects included, so a server of 35 models spent
    over 10 s stopping, past what a supervisor waits before it kills. Per thread (a context variable):
    models are closed on the device thread."""
    token = _DEFERRED.set([])
    try:
        yield
    finally:
        due = bool(_DEFERRED.get())
        _DEFERRED.reset(token)
        if due:
            collect_unloaded()


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None on a C library without it (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
    return trim


@cache
def _tcmalloc_release() -> Callable[[], None] | None:
    """tcmalloc's ``MallocExtension_ReleaseFreeMemory`` when the process runs on it (``sie.core.allocator``)."""
    release = getattr(ctypes.CDLL(None), "MallocExtension_ReleaseFreeMemory", None)
    if release is not None:
        release.argtypes = []
        release.restype = None
    return release


def trim_glibc() -> bool:
    """glibc's arenas only (a no-op under tcmalloc or jemalloc, which leave them empty); True if it
    released any pages."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


def return_free_memory() -> bool:
    """Hand the allocator's free pages back to the OS; True if glibc released any or tcmalloc was asked.

    A burst of large batches leaves gigabytes of freed activations with glibc malloc (its arenas keep
    them for the next allocation) and hundreds of megabytes in tcmalloc's page heap, so resident memory
    stays at its peak long after the burst. Releasing after every batch would fault those pages back in
    on the next one; releasing when the device goes idle costs nothing under load and brings an idle
    server back near its size after load.
    """
    release = _tcmalloc_release()
    if release is not None:
        release()
    return trim_glibc() or release is not None


class PeriodicTrim:
    """``trim_glibc`` between batches of a busy device, at most once per ``every_s``.

    The idle release never runs on a server that is never idle, and glibc malloc keeps freed
    activation and response buffers of ever-new batch shapes in its arenas: resident memory climbs for
    as long as the load lasts. tcmalloc and jemalloc (``sie.core.allocator``) reuse such pages without
    growing and are left alone here (releasing tcmalloc's page heap while busy would only fault it back
    in); on glibc this turns the climb into a swing (docs/benchmarks.md). One instance per device
    thread, so several models' batches share its clock.
    """

    def __init__(
        self,
        every_s: float = BUSY_TRIM_EVERY_S,
        trim: Callable[[], bool] = trim_glibc,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._every_s = every_s
        self._trim = trim
        self._clock = clock
        self._last = clock()

    def due(self) -> bool:
        """Whether a call now would trim: read on the event loop, so that a batch whose trim is not due
        costs no round trip to the device thread (most batches, at a trim every few seconds)."""
        return self._clock() - self._last >= self._every_s

    def __call__(self) -> bool:
        """True when it trimmed (whether or not pages went back)."""
        now = self._clock()
        if now - self._last < self._every_s:
            return False
        self._last = now
        self._trim()
        return True
