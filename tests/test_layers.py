"""The layers hold, and the contract that says so can fail: ``lint-imports`` over this tree keeps every
contract of ``pyproject.toml``, and over a copy where the gateway imports the engine it breaks the
one that forbids it. At run time the gateway and sie-config import no model layer and no torch,
transformers or FastAPI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).parent / "lint-imports"
MODEL_LAYERS = ("sie.engine", "sie.adapters", "sie.postprocess", "sie.server", "sie.worker")


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    return subprocess.run(
        [str(LINT), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_contract_is_kept() -> None:
    done = lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BROKEN" not in done.stdout


def test_a_gateway_that_imports_the_engine_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(
        REPO / "src" / "sie", tmp_path / "src" / "sie", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    routes = tmp_path / "src" / "sie" / "gateway" / "inference.py"
    routes.write_text(routes.read_text() + "\nfrom sie.engine.engine import Engine  # noqa: E402\n")
    done = lint(tmp_path)
    assert done.returncode != 0
    assert "The gateway and sie-config run no model" in done.stdout and "BROKEN" in done.stdout
    assert "sie.gateway.inference -> sie.engine.engine" in done.stdout


@pytest.mark.parametrize("app", ["sie.gateway.app", "sie.control.app"])
def test_the_gateway_and_sie_config_load_no_model_layer(app: str) -> None:
    probe = (
        f"import sys, {app}\n"
        f"ours = [m for m in sys.modules if m.startswith({MODEL_LAYERS!r})]\n"
        "print(sorted(set(ours) | ({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'fastapi'})))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
