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
from collections.abc import Callable
from functools import cache


def freeze_loaded() -> None:
    """After a model load: collect the load's garbage, then exempt everything alive from collections."""
    gc.collect()
    gc.freeze()


def collect_unloaded() -> None:
    """After a model is closed: its objects may sit in the permanent generation in cycles."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


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


def return_free_memory() -> bool:
    """Hand the allocator's free pages back to the OS; True if it released any.

    A burst of large batches leaves gigabytes of freed activations with glibc malloc (its arenas keep
    them for the next allocation), so resident memory stays at its peak long after the burst. Trimming
    after every batch would fault those pages back in on the next one; trimming when the device goes
    idle costs nothing under load and brings an idle server back near its size after load.
    """
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
