"""Where a running Python process spends its CPU: py-spy samples it, this module sums the samples.

``record`` runs ``py-spy record --format raw --gil`` (collapsed stacks: one line per distinct
stack, ``frame;frame;...;frame COUNT``, the outermost frame first) on a live process for a while.
``--gil`` keeps the samples of the thread that holds the GIL: Python code running, or C code called
from it (a socket write, msgpack), never an event loop waiting in ``epoll``. py-spy's own idle test
is not usable on an asyncio server under uvloop: it kept about a tenth of the samples the process's
CPU time implies, most of them in the loop's C code with no Python frame above, and with
``--nonblocking`` it kept nearly all of them, waits included. On a machine whose cores are
contended a thread that holds the GIL but waits for a core is sampled too, so the counts are shares
of the Python work, not CPU seconds (those come from /proc, bench/procs.py).

``summarize`` turns the stacks into three rankings: *self* samples by package (who runs: the NATS
client, uvicorn, Starlette, our gateway ...) and by function, and *inclusive* samples by function
(which calls the work goes through, each function counted once per stack so recursion does not
inflate it), leaving out the frames nearly every sample passes through (the CLI, uvicorn's
``run``, the loop itself), which say nothing.

py-spy is not a dependency of the project: it is looked up on PATH and beside the interpreter, and a
run without it says so instead of profiling (``pip install py-spy``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Final

_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def py_spy() -> str | None:
    """The py-spy executable: on PATH, else beside this interpreter; None when neither has it."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else None


def record(
    executable: str, pid: int, seconds: float, output: Path, rate: int = 200
) -> subprocess.Popen[bytes]:
    """Starts py-spy on ``pid`` for ``seconds``; the caller waits for it (``wait``) once its load ran."""
    output.parent.mkdir(parents=True, exist_ok=True)
    argv = [executable, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds)))]
    argv += ["--rate", str(rate), "--format", "raw", "--gil", "--output", str(output)]
    log = output.with_suffix(".log").open("wb")
    try:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()


@dataclass(frozen=True)
class Frame:
    function: str
    file: str

    @property
    def package(self) -> str:
        """What owns the code: the top-level package (``nats``, ``uvicorn``, ``asyncio``), and for
        ours its layer (``sie.gateway``). py-spy writes paths relative to the ``sys.path`` entry
        they were found under; an absolute one is cut after site-packages or the standard library."""
        path = self.file.replace("\\", "/")
        for marker in ("site-packages/", "dist-packages/"):
            path = path.split(marker, 1)[-1]
        path = re.sub(r"^.*?/python3\.\d+/", "", path)
        parts = [part for part in path.split("/") if part]
        if "sie" in parts[:-1]:
            rest = parts[parts.index("sie") + 1 :]
            return "sie." + rest[0].removesuffix(".py") if len(rest) > 1 else "sie"
        if path.startswith("/") or not parts:
            return Path(path).stem or "?"
        return parts[0].removesuffix(".py")

    @property
    def label(self) -> str:
        return f"{self.function} ({self.package})"


def parse_frame(text: str) -> Frame:
    """``function (path/to/file.py:123)`` as py-spy writes a frame; the line number is dropped so
    every line of a function counts as that function."""
    match = _FRAME.match(text.strip())
    if match is None:
        return Frame(text.strip(), "")
    return Frame(match["function"], match["file"])


def parse(raw: str) -> list[tuple[list[Frame], int]]:
    """The stacks of a raw (collapsed) py-spy file with their sample counts."""
    stacks = []
    for line in raw.splitlines():
        line = line.strip()
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        stacks.append(([parse_frame(frame) for frame in stack.split(";") if frame], int(count)))
    return stacks


@dataclass(frozen=True)
class Summary:
    samples: int
    self_by_package: list[tuple[str, int]]  # most first
    self_by_function: list[tuple[str, int]]
    inclusive_by_function: list[tuple[str, int]]  # without the frames in nearly every sample

    def lines(self, top: int = 12) -> list[str]:
        """Markdown: the three rankings, each a small table of shares of all samples (the inclusive
        one twice as long: its head is the request path's chain of middleware)."""
        if not self.samples:
            return ["(no samples: the process was idle or py-spy could not read it)"]
        out = [f"{self.samples} samples (shares of all)"]
        for title, ranking, rows in (
            ("self, by package", self.self_by_package, top),
            ("self, by function", self.self_by_function, top),
            ("inclusive, by function", self.inclusive_by_function, 2 * top),
        ):
            out += ["", f"| {title} | share |", "|---|---|"]
            out += [f"| {name} | {100 * count / self.samples:.0f}% |" for name, count in ranking[:rows]]
        return out


COMMON: Final = 0.9  # a frame in at least this share of the samples is the process's frame, not work's


def summarize(stacks: list[tuple[list[Frame], int]]) -> Summary:
    by_package: Counter[str] = Counter()
    by_function: Counter[str] = Counter()
    through: Counter[str] = Counter()
    total = 0
    for frames, count in stacks:
        if not frames:
            continue
        total += count
        by_package[frames[-1].package] += count
        by_function[frames[-1].label] += count
        for label in {frame.label for frame in frames}:
            through[label] += count
    inclusive = [(name, n) for name, n in through.most_common() if n < COMMON * total]
    return Summary(total, by_package.most_common(), by_function.most_common(), inclusive)
