"""The user's install that ``test_fresh_install`` checks, built in the background from the moment
the session has collected it.

A plain ``pip install 'sie_engine-*.whl[server]'`` into an empty venv is 80-160 s of one core (torch
alone is a large archive to unpack and byte-compile), while the tests before it run mostly on one
core of the two. Started as soon as collection has found the module (``tests/e2e/conftest.py``), at
a lower priority so the tests beside it keep their pace, the install is done or nearly so by the
time its tests run; run alone, they wait for it as before.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO

INSTALL_TIMEOUT_S = 900
PROJECT_FILES = ("pyproject.toml", "README.md", "NOTICE")  # what the build reads beside src/
BUILT = ("__pycache__", "*.egg-info", "*.pyc")  # left behind by earlier builds and runs: not sources
NICENESS = 10  # below the tests' own processes: they must not slow down because of it


@dataclass(frozen=True)
class FreshVenv:
    bin: Path
    pip_check: str  # `pip check` right after the install, before any test adds to the venv
    seconds: float  # from the build's start to the venv ready


def run(command: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``command`` run to its end; its failure, with both streams, as an ``AssertionError``."""
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False, env=env
    )
    assert done.returncode == 0, (
        f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    )
    return done


class BackgroundInstall:
    """One build of the fresh venv on a thread of its own; ``result`` waits for it."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="sie-fresh-install-"))
        self._future: Future[FreshVenv] = Future()
        self._thread = threading.Thread(target=self._build, name="fresh-install", daemon=True)
        self._running: subprocess.Popen[str] | None = None
        self._stopped = False

    def start(self) -> BackgroundInstall:
        self._thread.start()
        return self

    def result(self) -> FreshVenv:
        return self._future.result(timeout=INSTALL_TIMEOUT_S)

    def remove(self) -> None:
        """The build stopped where it is, if it still runs (an interrupted session), and its folder
        gone."""
        self._stopped = True
        running = self._running
        if running is not None and running.poll() is None:
            running.kill()
        self._thread.join(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)

    def _build(self) -> None:
        started = time.monotonic()
        try:
            self._future.set_result(self._install(started))
        except BaseException as exc:  # the test that waits for it reports it
            self._future.set_exception(exc)

    def _install(self, started: float) -> FreshVenv:
        # The wheel, built as a release would be (no editable install, no source tree on the path),
        # then an empty venv beside it, and pip's own resolution of the [server] extra into it. It is
        # built from a copy of the tree: a build in place rewrites src/sie_engine.egg-info, which the
        # processes of the tests running beside it read their own metadata from.
        source = self.root / "source"
        shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns(*BUILT))
        for name in PROJECT_FILES:
            shutil.copy2(REPO / name, source / name)
        build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        self._step([*build, "-w", str(self.root), str(source)])
        self._step([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(self.root / "venv")])
        (wheel,) = self.root.glob("sie_engine-*.whl")
        bin_dir = self.root / "venv" / "bin"
        self._step([str(bin_dir / "pip"), "install", "-q", "--disable-pip-version-check", f"{wheel}[server]"])
        pip_check = self._step([str(bin_dir / "pip"), "check"], must_pass=False)
        return FreshVenv(bin_dir, pip_check, time.monotonic() - started)

    def _step(self, command: list[str], must_pass: bool = True) -> str:
        """``command``'s output (both streams), run below the tests' priority; a failure, with its
        output, as an ``AssertionError``."""
        assert not self._stopped, "the session ended before the fresh install was built"
        self._running = subprocess.Popen(
            ["nice", "-n", str(NICENESS), *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        output, _ = self._running.communicate(timeout=INSTALL_TIMEOUT_S)
        code = self._running.returncode
        assert code == 0 or not must_pass, f"{' '.join(command)} failed ({code}):\n{output}"
        return output


_started: BackgroundInstall | None = None
_lock = threading.Lock()


def started() -> BackgroundInstall:
    """The session's one build, started on first call."""
    global _started
    with _lock:
        if _started is None:
            _started = BackgroundInstall().start()
        return _started


def remove() -> None:
    with _lock:
        if _started is not None:
            _started.remove()
