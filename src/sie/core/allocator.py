"""Which malloc the server process runs on, chosen before anything allocates.

Under sustained load of varying batch shapes, glibc malloc keeps freed activation and tokenizer
buffers in its per-thread arenas (up to 8 per core) and only hands them back when the process trims
(``sie.core.heap.return_free_memory``, run when the device goes idle): a server that is never idle
grows for as long as the load lasts. jemalloc returns dirty pages to the OS on a timer (its decay),
busy or not, so resident memory tracks what is live. It can only replace glibc before the process
starts, so the CLI re-executes itself once with ``LD_PRELOAD`` set (see ``plan`` and ``reexec``).

``SIE_ALLOCATOR``: ``auto`` (default: jemalloc when its library is installed, else the system's),
``jemalloc`` (required: fails if missing), ``system`` (no change), or a path to a malloc library.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ENV: Final = "SIE_ALLOCATOR"
APPLIED_ENV: Final = "SIE_ALLOCATOR_APPLIED"  # set in the re-executed process: never loop
JEMALLOC_NAMES: Final = ("libjemalloc.so.2", "libjemalloc.so")
JEMALLOC_DIRS: Final = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")
# Unused dirty pages go back to the OS within about a second, from jemalloc's own thread, whatever
# the load; a user's MALLOC_CONF wins.
JEMALLOC_CONF: Final = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0"


class AllocatorError(RuntimeError):
    """``SIE_ALLOCATOR`` names an allocator this machine does not have."""


@dataclass(frozen=True)
class Plan:
    """What to do before serving: nothing (``library`` None), or re-exec with ``env``."""

    library: str | None
    env: dict[str, str]
    reason: str


def find_jemalloc() -> str | None:
    """The jemalloc shared library (Debian/Ubuntu ``libjemalloc2``, Fedora ``jemalloc``), or None."""
    for folder in JEMALLOC_DIRS:
        for name in JEMALLOC_NAMES:
            if (Path(folder) / name).is_file():
                return str(Path(folder) / name)
    found = ctypes.util.find_library("jemalloc")
    return found if found and Path(found).is_absolute() else None


def plan(env: Mapping[str, str], find: Callable[[], str | None] = find_jemalloc) -> Plan:
    """The allocator decision from the environment alone (``find`` looks jemalloc up)."""
    if env.get(APPLIED_ENV):
        return Plan(None, {}, f"already running on {env[APPLIED_ENV]}")
    choice = env.get(ENV, "auto").strip() or "auto"
    if choice == "system":
        return Plan(None, {}, f"{ENV}=system")
    if choice in ("auto", "jemalloc"):
        library = find()
        if library is None:
            if choice == "jemalloc":
                raise AllocatorError(
                    f"{ENV}=jemalloc but no libjemalloc is installed (apt install libjemalloc2)"
                )
            return Plan(None, {}, "no libjemalloc installed; system malloc")
    else:
        if not Path(choice).is_file():
            raise AllocatorError(f"{ENV}={choice}: no such file")
        library = choice
    preload = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p]
    if any(Path(p).name == Path(library).name for p in preload):
        return Plan(None, {}, f"{library} already preloaded")
    new_env = {"LD_PRELOAD": " ".join([library, *preload]), APPLIED_ENV: library}
    if "jemalloc" in Path(library).name and "MALLOC_CONF" not in env:
        new_env["MALLOC_CONF"] = JEMALLOC_CONF
    return Plan(library, new_env, f"{ENV}={choice}")


def reexec() -> None:
    """Replace this process with itself on the planned allocator (Linux only; returns if none).
    Call it first thing in the CLI, before threads or large allocations exist."""
    if not sys.platform.startswith("linux"):
        return
    decided = plan(os.environ)
    if decided.library is None:
        return
    os.environ.update(decided.env)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
