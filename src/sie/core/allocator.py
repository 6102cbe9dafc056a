"""Which malloc the server process runs on, chosen before anything allocates.

Under sustained load of varying batch shapes, glibc malloc keeps freed activation and tokenizer
buffers in its arenas and only hands them back when the process trims: a busy server's resident
memory climbs and swings (``bench.soak``: +39 % in 6 minutes, peaks at 3x idle, with a trim every
10 s). tcmalloc (gperftools) reuses those buffers from its page heap, so resident memory settles at
the working set and stays there, and the saturated benchmark ran 1.25x faster on it than on glibc in
paired rounds (docs/benchmarks.md, "Memory under sustained load"); jemalloc also stays flat but ran
0.88x of glibc. An allocator can only replace glibc before the process starts, so the CLI
re-executes itself once with ``LD_PRELOAD`` set (see ``plan`` and ``reexec``).

``SIE_ALLOCATOR``: ``auto`` (default: tcmalloc, else jemalloc, whichever is installed first, else
the system's), ``tcmalloc`` or ``jemalloc`` (required: fails if missing), ``system`` (no change),
or a path to a malloc library.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

ENV: Final = "SIE_ALLOCATOR"
APPLIED_ENV: Final = "SIE_ALLOCATOR_APPLIED"  # set in the re-executed process: never loop
LIBRARY_DIRS: Final = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")


@dataclass(frozen=True)
class Allocator:
    name: str
    files: tuple[str, ...]
    link_name: str  # for ctypes.util.find_library
    package: str  # Debian/Ubuntu
    env: dict[str, str] = field(default_factory=dict)  # defaults; a user's own setting wins


TCMALLOC: Final = Allocator(
    "tcmalloc",
    ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"),
    "tcmalloc_minimal",
    "libtcmalloc-minimal4",
    # tcmalloc prints every allocation over 1 GiB to stderr; a large CPU batch makes such buffers.
    {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 40)},
)
JEMALLOC: Final = Allocator(
    "jemalloc",
    ("libjemalloc.so.2", "libjemalloc.so"),
    "jemalloc",
    "libjemalloc2",
    # Unused dirty pages go back from jemalloc's own thread over its default 10 s decay, busy or not.
    {"MALLOC_CONF": "background_thread:true,dirty_decay_ms:10000,muzzy_decay_ms:0"},
)
PREFERENCE: Final = (TCMALLOC, JEMALLOC)  # auto's order
BY_NAME: Final = {known.name: known for known in PREFERENCE}


class AllocatorError(RuntimeError):
    """``SIE_ALLOCATOR`` names an allocator this machine does not have."""


@dataclass(frozen=True)
class Plan:
    """What to do before serving: nothing (``library`` None), or re-exec with ``env``."""

    library: str | None
    env: dict[str, str]


def find(known: Allocator, dirs: Sequence[str] = LIBRARY_DIRS) -> str | None:
    """The allocator's shared library from the system's packages (``dirs`` first), or None."""
    for folder in dirs:
        for name in known.files:
            if (Path(folder) / name).is_file():
                return str(Path(folder) / name)
    found = ctypes.util.find_library(known.link_name)
    return found if found and Path(found).is_absolute() else None


def _defaults_for(library: str) -> dict[str, str]:
    name = Path(library).name
    return next((known.env for known in PREFERENCE if any(name.startswith(f) for f in known.files)), {})


def plan(env: Mapping[str, str], lookup: Callable[[Allocator], str | None] = find) -> Plan:
    """The allocator decision from the environment alone (``lookup`` finds an installed library)."""
    if env.get(APPLIED_ENV):
        return Plan(None, {})
    choice = env.get(ENV, "auto").strip() or "auto"
    if choice == "system":
        return Plan(None, {})
    if choice == "auto":
        library = next((path for known in PREFERENCE if (path := lookup(known)) is not None), None)
        if library is None:
            return Plan(None, {})
    elif choice in BY_NAME:
        known = BY_NAME[choice]
        library = lookup(known)
        if library is None:
            raise AllocatorError(
                f"{ENV}={choice} but no lib{choice} is installed (apt-get install {known.package})"
            )
    else:
        if not Path(choice).is_file():
            raise AllocatorError(f"{ENV}={choice}: no such file")
        library = choice
    preload = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p]
    if any(Path(p).name == Path(library).name for p in preload):
        return Plan(None, {})
    new_env = {"LD_PRELOAD": " ".join([library, *preload]), APPLIED_ENV: library}
    new_env |= {key: value for key, value in _defaults_for(library).items() if key not in env}
    return Plan(library, new_env)


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
