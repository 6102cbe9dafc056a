"""What a server imports before its port opens: the generation stack (transformers' continuous
batching and generation utilities, llguidance) only with a generative model, and a command line it
refuses before any of the engine."""

from __future__ import annotations

import subprocess
import sys
import time

GENERATION_STACK = ("transformers.generation", "llguidance", "sklearn")


def test_building_the_app_imports_no_generation_stack() -> None:
    """Those modules took 2.6 s of a server's start and ~270 MB of its idle memory whether or not it
    serves a generator; they come with the first generative model now."""
    probe = (
        "import sys, sie.server.app\n"
        f"print(sorted(m for m in sys.modules if m.startswith({GENERATION_STACK!r})))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_refused_command_line_fails_before_the_engine_is_imported() -> None:
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('torch' in sys.modules))\n"
        "from sie.server.cli import main\n"
        "main()"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code, "serve", "--bundle", "extract", "--models", "org/dense"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and "cannot specify both --bundle and --models" in done.stderr
    assert done.stdout.strip() == "False", "the refusal imported torch"
    print(f"refused in {time.monotonic() - started:.2f} s")
